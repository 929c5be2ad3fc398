//! Named link profiles (`ethernet-1g`, `wifi-good`, ...): ready-made `LinkConfig`s.
//!
//! Owns turning the profile table into `LinkConfig`s. The numbers and the source of each live in
//! one table, `python/roughnet/spec/profiles.toml`, read here when the crate is compiled (so the
//! wire's `--profile NAME`, the scenario format, `roughnet profiles` and the docs cannot
//! disagree). Side A is the "client" end (the host, the station, the handset, the ground
//! terminal); `a_to_b` is the uplink where the two directions differ; a profile's `both` table is
//! one direction configuration for both ways.

use std::sync::OnceLock;

use crate::config::LinkConfig;

/// The profile table (TOML), compiled in.
pub const PROFILE_TABLE: &str = include_str!("../../../python/roughnet/spec/profiles.toml");

fn table() -> &'static [(String, LinkConfig)] {
    static TABLE: OnceLock<Vec<(String, LinkConfig)>> = OnceLock::new();
    TABLE.get_or_init(|| parse_table(PROFILE_TABLE).unwrap_or_else(|e| panic!("profiles.toml: {e}")))
}

/// Parses a profile table: each `[[profile]]`'s `name` and `link` (with `both` expanded).
pub fn parse_table(text: &str) -> Result<Vec<(String, LinkConfig)>, String> {
    let doc: toml::Table = text.parse().map_err(|e| format!("{e}"))?;
    let entries = doc
        .get("profile")
        .and_then(|v| v.as_array())
        .ok_or("no [[profile]] entries")?;
    let mut out = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        let name = entry
            .get("name")
            .and_then(|v| v.as_str())
            .ok_or(format!("profile {i}: no name"))?
            .to_string();
        let mut link = entry
            .get("link")
            .and_then(|v| v.as_table())
            .cloned()
            .ok_or(format!("profile {name}: no link table"))?;
        if let Some(both) = link.remove("both") {
            for side in ["a_to_b", "b_to_a"] {
                if link.contains_key(side) {
                    return Err(format!("profile {name}: `both` and `{side}` together"));
                }
                link.insert(side.to_string(), both.clone());
            }
        }
        let cfg: LinkConfig = toml::Value::Table(link)
            .try_into()
            .map_err(|e| format!("profile {name}: {e}"))?;
        if out.iter().any(|(n, _)| *n == name) {
            return Err(format!("profile {name}: defined twice"));
        }
        out.push((name, cfg));
    }
    Ok(out)
}

/// The profiles' names, in the table's order.
pub fn profile_names() -> Vec<&'static str> {
    table().iter().map(|(n, _)| n.as_str()).collect()
}

/// The named profile, or None for an unknown name (see [`profile_names`]).
pub fn profile(name: &str) -> Option<LinkConfig> {
    table().iter().find(|(n, _)| n == name).map(|(_, c)| c.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_parses_and_both_means_both_ways() {
        let names = profile_names();
        assert!(names.contains(&"ethernet-1g"), "{names:?}");
        let e = profile("ethernet-1g").unwrap();
        assert_eq!(e.a_to_b, e.b_to_a);
        assert_eq!(e.a_to_b.rate_bps, Some(1_000_000_000));
        assert!(profile("token-ring").is_none());
    }

    #[test]
    fn bad_tables_are_refused_with_the_profile_named() {
        let both = "[[profile]]\nname = \"x\"\n[profile.link.both]\ndelay_ns = 1\n[profile.link.a_to_b]\ndelay_ns = 2\n";
        assert!(parse_table(both).unwrap_err().contains("`both` and `a_to_b`"));
        let unknown = "[[profile]]\nname = \"y\"\n[profile.link.both]\ndelay_ms = 1\n";
        let err = parse_table(unknown).unwrap_err();
        assert!(err.contains("profile y") && err.contains("delay_ms"), "{err}");
        let twice = "[[profile]]\nname = \"z\"\nlink = {}\n[[profile]]\nname = \"z\"\nlink = {}\n";
        assert!(parse_table(twice).unwrap_err().contains("twice"));
    }
}
