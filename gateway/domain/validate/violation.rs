//! What a check finds wrong with a request, in the client's terms.

use serde::Serialize;

/// One thing wrong with a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// The field, as a dotted path (`ref_images_url[3]`), or empty for the body as a whole.
    pub param: String,
    pub message: String,
}

impl Violation {
    pub fn new(param: impl Into<String>, message: impl Into<String>) -> Violation {
        Violation { param: param.into(), message: message.into() }
    }
}
