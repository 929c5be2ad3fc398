//! ROS 2 mode's names: topics (`rt/` + legal ROS 2 tokens), node names, the type of
//! `std_msgs/msg/UInt8MultiArray` and the length limits rclpy checks.

use super::*;

/// `roughnet/0123` -> `rt/roughnet/r0123` (ROS 2 names: tokens of [A-Za-z0-9_],
/// not starting with a digit).
pub fn ros2_topic(topic: &str) -> String {
    let toks: Vec<String> = topic
        .split('/')
        .filter(|t| !t.is_empty())
        .map(|t| {
            let t: String = t
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            if t.starts_with(|c: char| c.is_ascii_digit()) {
                format!("r{t}")
            } else {
                t
            }
        })
        .collect();
    format!("rt/{}", toks.join("/"))
}

/// `std_msgs/msg/UInt8MultiArray`'s type hash (REP 2011, the wheel's share/std_msgs/msg/UInt8MultiArray.json):
/// ROS 2 (Kilted) endpoints carry it in their user_data as `typehash=<this>;`.
pub const UINT8_MULTI_ARRAY_HASH: &str =
    "RIHS01_5687e861b8d307a5e48b7515467ae7a5fc2daf805bd0ce6d8e9e604bade9f385";

/// The ROS 2 node name the agent presents in ROS 2 mode (`roughnet_sender_4242`): its role and
/// process id, so that agents on one domain never share a node name.
pub fn node_name(role: Role, pid: u32) -> String {
    format!("roughnet_{}_{pid}", role.as_str())
}

/// ROS 2's longest topic name (rmw: RMW_TOPIC_MAX_NAME_LENGTH, 255 - 8 for the `rt/` and `rq/`..`Reply`
/// decorations).
pub const ROS2_NAME_MAX: usize = 255 - 8;

/// ROS 2 mode's default history depth: ROS's default QoS profile (keep last 10).
pub const ROS2_DEFAULT_DEPTH: i32 = 10;

/// ROS 2 mode: the run's topic gives legal ROS 2 names for every topic the driver creates (at least one
/// name token, so never `rt//data`; no name longer than ROS allows), else a configuration error naming
/// `topic`.
pub(super) fn check_ros2_names(topic: &str, cfg: &Config) -> Result<(), ConfigError> {
    let base = ros2_topic(topic);
    if base == "rt/" {
        return Err(ConfigError::invalid(
            "topic",
            format!("{topic:?}"),
            "a name with at least one letter, digit or underscore for protocol dds with ros2 = true",
        ));
    }
    let longest_key = cfg
        .peers
        .iter()
        .chain(cfg.listen.iter())
        .map(|a| addr_key(a, true).len())
        .max()
        .unwrap_or(0);
    // `/<base>/pong/<key>` is the longest (ROS names drop the `rt` prefix).
    let longest = base.len() - 2 + "/pong/".len() + longest_key;
    if longest > ROS2_NAME_MAX {
        return Err(ConfigError::invalid(
            "topic",
            format!("{topic:?}"),
            format!(
                "a topic whose ROS 2 names stay within {ROS2_NAME_MAX} characters (the ponger's reply topic would have {longest}) for protocol dds with ros2 = true"
            ),
        ));
    }
    Ok(())
}

pub fn type_name(ros2: bool) -> &'static str {
    if ros2 {
        "std_msgs::msg::dds_::UInt8MultiArray_"
    } else {
        "roughnet::Bytes"
    }
}
