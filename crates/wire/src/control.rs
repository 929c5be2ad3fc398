//! The control socket: a unix stream socket, one JSON command per line in, one JSON reply per line out
//! (`{"cmd":"stats"}`, `{"cmd":"set","config":{...}}`, `{"cmd":"down"}`, `{"cmd":"up"}`). It owns the
//! listener, the client connections and their line buffers, and parses commands; what a command does is
//! the forwarding loop's business (it passes a handler). Never blocks: everything is non-blocking and
//! driven by the loop's poll.

use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use roughnet_wire_core::Side;
use serde_json::Value;

use crate::errors::WireError;
use crate::report::error_line;

/// Longest command line accepted (a `set` with a schedule can be long, but not this long).
pub const MAX_LINE_BYTES: usize = 4 << 20;
/// Most clients connected at once.
pub const MAX_CLIENTS: usize = 16;

/// A parsed control command.
#[derive(Debug, Clone)]
pub enum Command {
    Stats,
    Set(Value),
    /// `down` / `up`; with `"direction": "a_to_b"` or `"b_to_a"` only frames travelling that way (a one-way
    /// partition), else both; on a shared segment `a_to_b` is the uplinks (into the segment), `b_to_a` the
    /// downlinks, and `"port": N` limits the change to one port (N in command-line order).
    Link { up: bool, direction: Option<Side>, port: Option<usize> },
}

/// Parse one command line; Err is the reply to send.
pub fn parse_command(line: &[u8]) -> Result<Command, Value> {
    let bad = |m: String| error_line("request", &m);
    let v: Value = serde_json::from_slice(line)
        .map_err(|e| bad(format!("control command is not JSON ({e}); expected one object per line like {{\"cmd\":\"stats\"}}")))?;
    let cmd = v.get("cmd").and_then(Value::as_str).ok_or_else(|| {
        bad("control command has no string \"cmd\"; expected one of stats, set, down, up".to_string())
    })?;
    match cmd {
        "stats" => Ok(Command::Stats),
        "down" | "up" => {
            let direction = match v.get("direction") {
                None | Some(Value::Null) => None,
                Some(Value::String(d)) if d == "a_to_b" => Some(Side::A),
                Some(Value::String(d)) if d == "b_to_a" => Some(Side::B),
                Some(other) => {
                    return Err(bad(format!("\"direction\" = {other}; expected \"a_to_b\" or \"b_to_a\" (or none: both)")))
                }
            };
            let port = match v.get("port") {
                None | Some(Value::Null) => None,
                Some(p) => match p.as_u64() {
                    Some(n) => Some(n as usize),
                    None => return Err(bad(format!("\"port\" = {p}; expected a port number (0 = the first --port)"))),
                },
            };
            Ok(Command::Link { up: cmd == "up", direction, port })
        }
        "set" => match v.get("config") {
            Some(c) if c.is_object() => Ok(Command::Set(c.clone())),
            _ => Err(bad("\"set\" needs \"config\": a link configuration object (as in --config)".to_string())),
        },
        other => Err(bad(format!("unknown control command {other:?}; expected one of stats, set, down, up"))),
    }
}

struct Client {
    stream: UnixStream,
    inbuf: Vec<u8>,
    outbuf: Vec<u8>,
    closed: bool,
}

pub struct ControlServer {
    listener: UnixListener,
    path: PathBuf,
    clients: Vec<Client>,
}

impl ControlServer {
    /// Bind the socket at `path` (its folder is created). A stale socket file left by a dead wire is
    /// replaced; a live one (something answers) or a non-socket file is an error.
    pub fn bind(path: &Path) -> Result<Self, WireError> {
        let cfg = |m: String| WireError::Config(m);
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir)
                    .map_err(|e| WireError::Io(format!("control socket folder {}: {e}", dir.display())))?;
            }
        }
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if !meta.file_type().is_socket() {
                return Err(cfg(format!("control path {} exists and is not a socket; expected a free path", path.display())));
            }
            if UnixStream::connect(path).is_ok() {
                return Err(cfg(format!("control socket {} is in use by another process", path.display())));
            }
            let _ = std::fs::remove_file(path);
        }
        let listener = UnixListener::bind(path)
            .map_err(|e| WireError::Io(format!("control socket {}: bind: {e}", path.display())))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| WireError::Io(format!("control socket {}: {e}", path.display())))?;
        Ok(Self { listener, path: path.to_path_buf(), clients: Vec::new() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Descriptors to poll, with their events (the listener, each client; POLLOUT while a reply is pending).
    pub fn poll_fds(&self, fds: &mut Vec<libc::pollfd>) {
        fds.push(libc::pollfd { fd: self.listener.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        for c in &self.clients {
            let mut events = libc::POLLIN;
            if !c.outbuf.is_empty() {
                events |= libc::POLLOUT;
            }
            fds.push(libc::pollfd { fd: c.stream.as_raw_fd(), events, revents: 0 });
        }
    }

    /// Accept new clients, read what they sent, run each complete command through `handle` and queue its
    /// reply, write pending replies. Cheap when nothing happened (a few EAGAINs).
    pub fn service(&mut self, handle: &mut dyn FnMut(Command) -> Value) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    if self.clients.len() >= MAX_CLIENTS || stream.set_nonblocking(true).is_err() {
                        let mut s = stream;
                        let msg = error_line("request", &format!("too many control clients (maximum = {MAX_CLIENTS})"));
                        let _ = s.write_all(format!("{msg}\n").as_bytes());
                        continue;
                    }
                    self.clients.push(Client { stream, inbuf: Vec::new(), outbuf: Vec::new(), closed: false });
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!("control socket accept: {e}");
                    break;
                }
            }
        }
        for c in &mut self.clients {
            let mut chunk = [0u8; 8192];
            loop {
                match c.stream.read(&mut chunk) {
                    Ok(0) => {
                        c.closed = true;
                        break;
                    }
                    Ok(n) => c.inbuf.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => {
                        c.closed = true;
                        break;
                    }
                }
            }
            while let Some(pos) = c.inbuf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = c.inbuf.drain(..=pos).collect();
                let line = &line[..line.len() - 1];
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let reply = match parse_command(line) {
                    Ok(cmd) => handle(cmd),
                    Err(reply) => reply,
                };
                c.outbuf.extend_from_slice(reply.to_string().as_bytes());
                c.outbuf.push(b'\n');
            }
            if c.inbuf.len() > MAX_LINE_BYTES {
                let msg = error_line("request", &format!("control line too long (maximum = {MAX_LINE_BYTES} bytes)"));
                c.outbuf.extend_from_slice(format!("{msg}\n").as_bytes());
                c.inbuf.clear();
            }
            while !c.outbuf.is_empty() {
                match c.stream.write(&c.outbuf) {
                    Ok(n) if n > 0 => {
                        c.outbuf.drain(..n);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    _ => {
                        // The peer is gone: its replies cannot be delivered.
                        c.closed = true;
                        c.outbuf.clear();
                        break;
                    }
                }
            }
        }
        // A client that closed its end is dropped once its replies are out (or cannot go out).
        self.clients.retain(|c| !(c.closed && c.outbuf.is_empty()));
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    #[test]
    fn parses_commands() {
        assert!(matches!(parse_command(br#"{"cmd":"stats"}"#), Ok(Command::Stats)));
        assert!(matches!(parse_command(br#"{"cmd":"down"}"#), Ok(Command::Link { up: false, direction: None, port: None })));
        assert!(matches!(parse_command(br#"{"cmd":"up"}"#), Ok(Command::Link { up: true, direction: None, port: None })));
        assert!(matches!(
            parse_command(br#"{"cmd":"down","direction":"b_to_a"}"#),
            Ok(Command::Link { up: false, direction: Some(Side::B), port: None })
        ));
        assert!(parse_command(br#"{"cmd":"down","direction":"sideways"}"#).is_err());
        assert!(matches!(
            parse_command(br#"{"cmd":"down","port":2}"#),
            Ok(Command::Link { up: false, direction: None, port: Some(2) })
        ));
        assert!(parse_command(br#"{"cmd":"down","port":"x"}"#).is_err());
        assert!(matches!(parse_command(br#"{"cmd":"set","config":{"a_to_b":{}}}"#), Ok(Command::Set(_))));
        let e = parse_command(br#"{"cmd":"set"}"#).unwrap_err();
        assert!(e["message"].as_str().unwrap().contains("config"));
        let e = parse_command(br#"{"cmd":"fly"}"#).unwrap_err();
        assert!(e["message"].as_str().unwrap().contains("fly"));
        let e = parse_command(b"not json").unwrap_err();
        assert_eq!(e["type"], "error");
    }

    #[test]
    fn serves_lines_over_a_socket() {
        let dir = std::env::temp_dir().join(format!("rn-wire-ctl-{}", std::process::id()));
        let path = dir.join("c.sock");
        let mut server = ControlServer::bind(&path).unwrap();
        let mut client = UnixStream::connect(&path).unwrap();
        client.write_all(b"{\"cmd\":\"up\"}\n{\"cmd\":\"nope\"}\n").unwrap();
        let mut seen = Vec::new();
        let mut reader = std::io::BufReader::new(client.try_clone().unwrap());
        client.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        // Drive the server until both replies were produced (bounded: the data is already in the socket).
        for _ in 0..100 {
            server.service(&mut |cmd| {
                seen.push(format!("{cmd:?}"));
                serde_json::json!({"v":1,"type":"ok"})
            });
            if seen.len() == 1 && server.clients.iter().all(|c| c.outbuf.is_empty() && c.inbuf.is_empty()) {
                break;
            }
        }
        let mut l1 = String::new();
        let mut l2 = String::new();
        reader.read_line(&mut l1).unwrap();
        reader.read_line(&mut l2).unwrap();
        assert_eq!(seen, vec!["Link { up: true, direction: None, port: None }".to_string()]);
        assert!(l1.contains("\"ok\""), "{l1}");
        assert!(l2.contains("unknown control command"), "{l2}");
        drop(server);
        assert!(!path.exists());
        let _ = std::fs::remove_dir(&dir);
    }
}
