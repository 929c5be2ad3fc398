#!/usr/bin/env bash
# Fetch the runtime jars of Apache Kafka 4.3.1 (pinned in services/kafka/pom.xml) from Maven
# Central into $ROUGHNET_KAFKA_HOME/libs (default /var/cache/roughnet/kafka-4.3.1/libs), only when
# they are missing. Maven's own cache (~/.m2) makes a second fetch on the same machine offline.
# Idempotent: a complete libs folder (marked by .complete) is left alone. Prints what it does.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
POM="$HERE/services/kafka/pom.xml"
KAFKA_VERSION=4.3.1
KAFKA_HOME="${ROUGHNET_KAFKA_HOME:-/var/cache/roughnet/kafka-$KAFKA_VERSION}"
LIBS="$KAFKA_HOME/libs"
STAMP="$LIBS/.complete"
# The stamp records the pom's checksum: editing a pinned version refetches.
POM_SUM="$(sha256sum "$POM" | cut -d' ' -f1)"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$POM_SUM" ]] && ls "$LIBS"/kafka_2.13-"$KAFKA_VERSION".jar >/dev/null 2>&1; then
    echo "fetch-kafka: Kafka $KAFKA_VERSION jars already in $LIBS ($(ls "$LIBS"/*.jar | wc -l) jars); nothing to do"
    exit 0
fi

command -v mvn >/dev/null || { echo "fetch-kafka: mvn not found; install it with: apt-get install -y maven openjdk-17-jre-headless" >&2; exit 1; }
command -v java >/dev/null || { echo "fetch-kafka: java not found; install it with: apt-get install -y openjdk-17-jre-headless" >&2; exit 1; }

echo "fetch-kafka: copying the runtime jars of Kafka $KAFKA_VERSION (services/kafka/pom.xml) into $LIBS"
echo "fetch-kafka: (Maven Central, cached in ~/.m2; about 90 jars, 55 MB on a first fetch)"
TMP="$KAFKA_HOME/libs.tmp.$$"
rm -rf "$TMP"
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
mvn -B -q -Dstyle.color=never -f "$POM" dependency:copy-dependencies -DoutputDirectory="$TMP" -DincludeScope=runtime
echo "$POM_SUM" >"$TMP/.complete"
rm -rf "$LIBS"
mv "$TMP" "$LIBS"
trap - EXIT
echo "fetch-kafka: done: $(ls "$LIBS"/*.jar | wc -l) jars, $(du -sh "$LIBS" | cut -f1) in $LIBS"
