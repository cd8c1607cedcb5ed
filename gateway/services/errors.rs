//! What a use case answers when it cannot do what it was asked: a refusal it describes itself, or the
//! failure of a port it called. Each maps onto the catalogue through `ErrorCode`, so the edges render any of
//! them alike.

use crate::domain::errors::{Code, ErrorCode, Problem};
use crate::domain::validate::Violation;
use crate::ports::storage::StoreError;
use crate::ports::upstream::UpstreamError;
use std::borrow::Cow;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ServiceError {
    #[error("{0}")]
    Refused(Problem),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
}

impl ServiceError {
    /// The same error, naming the request field it is about.
    pub fn with_param(self, param: &str) -> ServiceError {
        ServiceError::Refused(Problem::of(&self).with_param(param))
    }

    fn inner(&self) -> &dyn ErrorCode {
        match self {
            ServiceError::Refused(problem) => problem,
            ServiceError::Store(error) => error,
            ServiceError::Upstream(error) => error,
        }
    }
}

impl From<Problem> for ServiceError {
    fn from(problem: Problem) -> ServiceError {
        ServiceError::Refused(problem)
    }
}

impl ErrorCode for ServiceError {
    fn error_code(&self) -> Code {
        self.inner().error_code()
    }

    fn message(&self) -> Cow<'_, str> {
        self.inner().message()
    }

    fn param(&self) -> Option<&str> {
        self.inner().param()
    }

    fn retry_after(&self) -> Option<u64> {
        self.inner().retry_after()
    }

    fn violations(&self) -> &[Violation] {
        self.inner().violations()
    }

    fn logged(&self) -> Option<String> {
        self.inner().logged()
    }
}
