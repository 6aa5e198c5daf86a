//! The storage error type; the one place `heed` errors are classified.

/// Result alias for storage operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong below the catalog.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The environment's memory map is full; the write was rolled back.
    #[error("database storage is full (the map size is {map_size} bytes); raise storage.maxDatabaseSize")]
    MapFull {
        /// The configured map size in bytes.
        map_size: usize,
    },
    /// A file is not a valid environment, or stored bytes do not decode.
    #[error("storage is corrupt: {0}")]
    Corrupt(String),
    /// An operating-system I/O failure.
    #[error("storage I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The writer's queue is full; the caller may retry later.
    #[error("the database's write queue is full, retry later")]
    Overloaded,
    /// The writer thread has stopped (the database is closing or was dropped).
    #[error("the database is closed")]
    Closed,
    /// A key is longer than the engine can store.
    #[error("key is too long: {len} bytes encoded, at most {max}")]
    KeyTooLong {
        /// Encoded length of the key.
        len: usize,
        /// Largest accepted encoded length.
        max: usize,
    },
    /// The database already holds as many tables as one environment can.
    #[error("a database holds at most {max} tables")]
    TooManyTables {
        /// The limit.
        max: u32,
    },
    /// A value cannot be used as a key (for example NaN).
    #[error("value cannot be used as a key: {0}")]
    InvalidKey(&'static str),
    /// Another job in the same group commit failed after writing, so the whole batch
    /// was rolled back; this write was not applied and may be retried.
    #[error("the write was rolled back because another write in its batch failed ({0}); retry it")]
    BatchAborted(String),
    /// A write job panicked; its changes were rolled back.
    #[error("internal error: a write job panicked: {0}")]
    JobPanicked(String),
    /// Any other LMDB failure: a bug or an environment problem.
    #[error("storage engine error: {0}")]
    Internal(String),
}

impl From<heed::Error> for Error {
    fn from(err: heed::Error) -> Self {
        use heed::MdbError;
        match err {
            heed::Error::Io(io) => Error::Io(io),
            heed::Error::Mdb(MdbError::MapFull) => Error::MapFull { map_size: 0 },
            heed::Error::Mdb(MdbError::DbsFull) => Error::TooManyTables { max: crate::names::MAX_TABLES },
            heed::Error::Mdb(MdbError::Invalid | MdbError::Corrupted | MdbError::VersionMismatch) => {
                Error::Corrupt(err.to_string())
            }
            other => Error::Internal(other.to_string()),
        }
    }
}

impl From<rmp_serde::encode::Error> for Error {
    fn from(err: rmp_serde::encode::Error) -> Self {
        Error::Internal(format!("encoding a log entry: {err}"))
    }
}

impl From<rmp_serde::decode::Error> for Error {
    fn from(err: rmp_serde::decode::Error) -> Self {
        Error::Corrupt(format!("decoding a stored entry: {err}"))
    }
}
