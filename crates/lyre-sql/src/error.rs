//! What a SQL statement can fail with.

use lyre_core::Code;

/// Result alias for the SQL engine.
pub type Result<T, E = SqlError> = std::result::Result<T, E>;

/// Why a statement was refused or failed. Every variant but [`SqlError::Core`] is the
/// client's to fix (400); core's errors keep their own codes (unknown database or
/// table, a forbidden attribute, a write's precondition).
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    /// The text does not parse; the message (Harper's, `Invalid SQL at: …`) quotes
    /// where and names the line and column.
    #[error("{0}")]
    Syntax(String),
    /// Valid SQL that Lyre does not run, naming the construct.
    #[error("{0} is not supported in SQL")]
    Unsupported(String),
    /// A statement that parses but cannot run as written (an unknown column, a
    /// function given the wrong arguments), naming the problem.
    #[error("{0}")]
    Invalid(String),
    /// An intermediate result (joined rows, groups, a sort) grew past the budget.
    #[error(
        "the statement needs more than its memory budget of {budget} bytes for intermediate results; narrow it with conditions or a LIMIT"
    )]
    OverBudget {
        /// The budget, in bytes.
        budget: usize,
    },
    /// A failure of the table API underneath.
    #[error(transparent)]
    Core(#[from] lyre_core::Error),
}

impl SqlError {
    /// The code protocols render it with.
    pub fn code(&self) -> Code {
        match self {
            SqlError::Core(err) => err.code(),
            _ => Code::BadRequest,
        }
    }

    /// An [`SqlError::Invalid`] from anything printable.
    pub(crate) fn invalid(message: impl Into<String>) -> SqlError {
        SqlError::Invalid(message.into())
    }

    /// An [`SqlError::Unsupported`] naming `what`.
    pub(crate) fn unsupported(what: impl std::fmt::Display) -> SqlError {
        SqlError::Unsupported(what.to_string())
    }
}
