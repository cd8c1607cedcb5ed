//! What the web edges (the HTTP API and the console) share: the error answer and each code's status, the
//! request id, and the small readers and writers of URLs both use. It imports no other edge.

pub mod error;
pub mod request_id;
pub mod trail;

use crate::domain::errors::Problem;

/// The one of `all` named `value` (by `name`), or a 400 naming `param` that lists the names it takes.
pub fn one_of<T: Copy>(param: &'static str, value: &str, all: &[T], name: fn(T) -> &'static str) -> Result<T, Problem> {
    all.iter().copied().find(|item| name(*item) == value).ok_or_else(|| {
        let known: Vec<&str> = all.iter().map(|item| name(*item)).collect();
        Problem::invalid_parameter(param, format!("Unknown {param} `{value}`; use one of {}.", known.join(", ")))
    })
}

/// `text` as one URL path segment: every character but the unreserved ones (RFC 3986) percent-encoded.
pub fn path_segment(text: &str) -> String {
    const ESCAPED: &percent_encoding::AsciiSet =
        &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');
    percent_encoding::utf8_percent_encode(text, ESCAPED).to_string()
}
