//! The two ways roughnet-wire fails, and their exit codes: a bad configuration or command line (exit 2,
//! nothing was forwarded) and a runtime failure of the sockets or the control socket (exit 1).

use thiserror::Error;

#[derive(Debug, Error)]
pub enum WireError {
    /// The configuration (file, JSON, interface names, options) is wrong; the message says what was expected.
    #[error("{0}")]
    Config(String),
    /// A system call failed while setting up or forwarding.
    #[error("{0}")]
    Io(String),
}

impl WireError {
    pub fn exit_code(&self) -> i32 {
        match self {
            WireError::Config(_) => 2,
            WireError::Io(_) => 1,
        }
    }

    /// The `kind` field of the JSON error line.
    pub fn kind(&self) -> &'static str {
        match self {
            WireError::Config(_) => "config",
            WireError::Io(_) => "io",
        }
    }
}
