//! How a flow ended (`Outcome`), the error line a failed one prints (`report`), and a flow's body run with
//! its failure or panic turned into its outcome (`run_flow`).

use std::error::Error as StdError;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::output;
use crate::patterns::{self, PatternError};

/// The message of a flow that never ran.
pub(super) fn not_started(id: u32) -> String {
    format!("flow {id}: stopped before its start")
}

/// How a flow ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Done,
    /// Its error line: kind ("io" / "protocol") and message ("flow K: ...").
    Failed {
        kind: &'static str,
        message: String,
    },
}

/// Why a flow's body failed.
pub enum FlowError {
    NotStarted,
    Run(PatternError),
}

/// Run a flow's body, turning its failure or panic into the outcome (its error line's words).
pub fn run_flow(id: u32, body: impl FnOnce() -> Result<(), FlowError>) -> Outcome {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => Outcome::Done,
        Ok(Err(FlowError::NotStarted)) => Outcome::Failed {
            kind: "io",
            message: not_started(id),
        },
        Ok(Err(FlowError::Run(e))) => Outcome::Failed {
            kind: patterns::error_kind(&e),
            message: format!("flow {id}: {}", describe(&e)),
        },
        Err(p) => Outcome::Failed {
            kind: "io",
            message: format!("flow {id}: internal error: {}", panic_message(p.as_ref())),
        },
    }
}

/// Print a failed flow's error line (and log it).
pub(crate) fn report(out: &Outcome) {
    if let Outcome::Failed { kind, message } = out {
        tracing::error!("{message}");
        output::error(kind, message);
    }
}

/// An error and its causes in one line, without repeating a cause a message already quotes
/// (as main's `describe` does for the run command).
pub fn describe(e: &(dyn StdError + 'static)) -> String {
    let mut out = String::new();
    let mut cur = Some(e);
    while let Some(c) = cur {
        let part = c.to_string();
        if !out.contains(&part) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&part);
        }
        cur = c.source();
    }
    out
}

pub(super) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}
