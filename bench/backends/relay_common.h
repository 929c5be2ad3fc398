/* relay_common.h: what the three benchmark relays (AF_PACKET, TAP, AF_XDP) share: the stop flag and signal
 * handlers, per-direction counters, the JSON lines they print (ready, stats, error), CPU time of the process.
 * Each relay forwards frames between two sides, 0 = A, 1 = B, one thread, no impairment. Not roughnet-wire:
 * throwaway measurement code for docs/wire.md's "I/O back end: measured and chosen". */
#ifndef RELAY_COMMON_H
#define RELAY_COMMON_H

#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define BATCH 64          /* frames per receive batch, as roughnet-wire and MEASUREMENTS.md's relay */
#define FRAME_MAX 4096    /* offloads are off: frames are at most MTU + 14 bytes */

struct dir_stats {
	uint64_t packets, bytes, drops, polls_idle;
	uint64_t kernel_drops; /* frames the kernel dropped before the relay saw them (socket or ring full) */
};

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
	(void)sig;
	g_stop = 1;
}

static void install_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal; /* no SA_RESTART: poll() returns EINTR and the loop sees g_stop */
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
}

/* Print one error line on stdout and exit 1. */
static void die(const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	for (char *p = msg; *p; p++)
		if (*p == '"' || *p == '\\')
			*p = '\'';
	printf("{\"type\":\"error\",\"message\":\"%s\"}\n", msg);
	fflush(stdout);
	exit(1);
}

static void print_stats(const char *backend, const struct dir_stats st[2])
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	printf("{\"type\":\"stats\",\"backend\":\"%s\",\"user_s\":%.3f,\"sys_s\":%.3f,", backend,
	       ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6, ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
	for (int d = 0; d < 2; d++)
		printf("\"%s\":{\"packets\":%llu,\"bytes\":%llu,\"drops\":%llu,\"kernel_drops\":%llu,"
		       "\"idle_polls\":%llu}%s",
		       d == 0 ? "a_to_b" : "b_to_a", (unsigned long long)st[d].packets,
		       (unsigned long long)st[d].bytes, (unsigned long long)st[d].drops,
		       (unsigned long long)st[d].kernel_drops,
		       (unsigned long long)st[d].polls_idle, d == 0 ? "," : "}\n");
	fflush(stdout);
}

#endif
