//! Reading the family's task answers: a task's status, its result files, its usage, its failure, into the
//! port's [`Observed`].
//!
//! The upstream's success payloads differ per family (docs/upstream-protocol.md section 5); result URLs are
//! collected from every place a family puts them, so no model is named here. An answer is read straight
//! from its bytes into [`Reported`] (strings borrowed, unknown fields skipped), not into a `Value` tree.

use crate::domain::catalog::Media;
use crate::domain::clock::{local_time, now_ms};
use crate::domain::results::{FailedItem, TaskResult};
use crate::domain::tasks::TaskError;
use crate::domain::usage::{Measured, Reading, Usage};
use crate::ports::upstream::Observed;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// What an upstream answer says about its task. Lists may also come as `null`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Reported<'a> {
    #[serde(borrow)]
    pub output: Output<'a>,
    /// As it came: stored on the task and priced from.
    #[serde(borrow)]
    pub usage: Option<&'a RawValue>,
}

/// An answer's `output`: the task's state and every field a family puts result URLs in.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Output<'a> {
    #[serde(borrow)]
    pub task_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    task_status: Option<Cow<'a, str>>,
    #[serde(borrow)]
    code: Option<Cow<'a, str>>,
    #[serde(borrow)]
    message: Option<Cow<'a, str>>,
    #[serde(borrow)]
    video_url: Option<Cow<'a, str>>,
    #[serde(borrow)]
    output_image_url: Option<Cow<'a, str>>,
    #[serde(borrow)]
    output_vis_image_url: Option<Cow<'a, str>>,
    #[serde(borrow)]
    results: Option<Vec<Item<'a>>>,
    #[serde(borrow)]
    render_urls: Option<Vec<Option<Cow<'a, str>>>>,
    #[serde(borrow)]
    choices: Option<Vec<Choice<'a>>>,
}

/// An entry of `results`; a failed one carries no `url`, and says why in `code` and `message`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Item<'a> {
    #[serde(borrow)]
    url: Option<Cow<'a, str>>,
    #[serde(borrow)]
    code: Option<Cow<'a, str>>,
    #[serde(borrow)]
    message: Option<Cow<'a, str>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Choice<'a> {
    #[serde(borrow)]
    message: Message<'a>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Message<'a> {
    #[serde(borrow)]
    content: Option<Vec<Content<'a>>>,
}

/// A content item: an image (`image`, or `image_url` in some families) or text.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Content<'a> {
    #[serde(borrow)]
    image: Option<Cow<'a, str>>,
    #[serde(borrow)]
    image_url: Option<Cow<'a, str>>,
}

/// The members of the family's `usage` that say what was delivered, each as it came.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct UsageMembers {
    duration: Option<Value>,
    video_duration: Option<Value>,
    /// Seconds of reference video counted into `duration` (r2v).
    input_video_duration: Option<Value>,
    #[serde(rename = "SR")]
    sr: Option<Value>,
    audio: Option<Value>,
    image_count: Option<Value>,
    input_tokens: Option<Value>,
    /// There even as `null` (which is no count).
    #[serde(deserialize_with = "present")]
    output_tokens: Option<Value>,
}

/// A member that is there, even as `null`.
fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// What a `usage` report says was delivered (docs/upstream-protocol.md section 5): seconds are `duration`
/// (input and output), else `video_duration`; the tier is `SR`; images `image_count`. A member that is there
/// must be a count, never negative, and whole where it counts things. A report that is no object says
/// nothing; one that names a member twice reads as its `Value` would (the last one counts).
pub fn measure(usage: &Usage) -> Measured {
    let text = usage.json().get();
    // Only an object has members (serde would read an array's items as the fields in order).
    if !text.trim_start().starts_with('{') {
        return Measured::default();
    }
    let members: UsageMembers = serde_json::from_str(text)
        .or_else(|_| serde_json::from_str::<Value>(text).and_then(serde_json::from_value))
        .unwrap_or_default();
    let count = |member: &Option<Value>| match member {
        None => Reading::Absent,
        Some(value) => value.as_f64().filter(|n| n.is_finite() && *n >= 0.0).map_or(Reading::Unusable, Reading::Count),
    };
    let whole = |member: &Option<Value>| match member {
        None => Reading::Absent,
        Some(value) => value.as_u64().map_or(Reading::Unusable, Reading::Count),
    };
    let seconds = if members.duration.is_some() { &members.duration } else { &members.video_duration };
    Measured {
        seconds: count(seconds),
        input_video_seconds: count(&members.input_video_duration),
        resolution: members.sr.as_ref().and_then(Value::as_u64).map(|sr| format!("{sr}P")),
        audio: members.audio.as_ref().and_then(Value::as_bool),
        images: whole(&members.image_count),
        input_tokens: whole(&members.input_tokens),
        output_tokens: whole(&members.output_tokens),
    }
}

/// Result files stay downloadable this long after success.
pub const RESULT_TTL_HOURS: i64 = 24;

/// Interprets a `GET /tasks/{id}` answer.
pub fn observe(answer: Reported<'_>, media: Media) -> Observed {
    let output = &answer.output;
    match output.task_status.as_deref().unwrap_or("UNKNOWN") {
        "PENDING" => Observed::Pending,
        "RUNNING" | "SUSPENDED" => Observed::Running,
        "SUCCEEDED" => {
            let usage = answer.usage.map(Usage::from);
            let measured = usage.as_ref().map(measure);
            Observed::Succeeded { results: results(output, media), failed: failed(output), usage, measured }
        }
        "FAILED" => Observed::Failed(TaskError {
            code: output.code.as_deref().unwrap_or("UpstreamFailed").to_string(),
            message: output.message.as_deref().unwrap_or("The upstream failed the task.").to_string(),
        }),
        "CANCELED" | "CANCELLED" => Observed::Cancelled,
        _ => Observed::Failed(TaskError {
            code: "UpstreamTaskUnknown".into(),
            message: "The upstream no longer knows this task (unknown or older than 24 hours).".into(),
        }),
    }
}

/// Every result URL of a success payload, in the upstream's order.
pub fn results(output: &Output<'_>, media: Media) -> Vec<TaskResult> {
    let singles = [&output.video_url, &output.output_image_url, &output.output_vis_image_url];
    let listed = output.results.iter().flatten().map(|item| &item.url);
    let rendered = output.render_urls.iter().flatten();
    let contents = output.choices.iter().flatten().flat_map(|choice| choice.message.content.iter().flatten());
    let in_content = contents.map(|item| if item.image.is_some() { &item.image } else { &item.image_url });
    let urls = singles.into_iter().chain(listed).chain(rendered).chain(in_content).flatten();
    let expires_at = local_time(now_ms() + RESULT_TTL_HOURS * 3_600_000);
    urls.map(|url| TaskResult { url: url.to_string(), kind: media.as_str().into(), expires_at: expires_at.clone() })
        .collect()
}

/// The entries of `results` that carry no URL: the items the upstream could not make.
pub fn failed(output: &Output<'_>) -> Vec<FailedItem> {
    let items = output.results.iter().flatten().enumerate().filter(|(_, item)| item.url.is_none());
    items
        .map(|(index, item)| FailedItem {
            index,
            code: item.code.as_deref().unwrap_or("UpstreamFailed").to_string(),
            message: item.message.as_deref().unwrap_or("The upstream could not make this item.").to_string(),
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn urls(answer: &str) -> Vec<String> {
        let reported: Reported = serde_json::from_str(answer).unwrap();
        results(&reported.output, Media::Image).into_iter().map(|r| r.url).collect()
    }

    /// Every place docs/upstream-protocol.md section 5 puts result URLs, in the upstream's order; failed items,
    /// text and unknown fields are skipped, and a list may be `null`.
    #[test]
    fn result_urls_are_read_from_every_family_shape() {
        assert_eq!(
            urls(r#"{"output":{"task_status":"SUCCEEDED","video_url":"v.mp4"},"usage":{"duration":5}}"#),
            ["v.mp4"]
        );
        assert_eq!(
            urls(
                r#"{"output":{"results":[{"url":"a.png","orig_prompt":"x"},{"code":"DataInspectionFailed","message":"m"},{"url":"b.png"}],"task_metrics":{"TOTAL":3}}}"#
            ),
            ["a.png", "b.png"]
        );
        assert_eq!(
            urls(r#"{"output":{"output_image_url":"o.png","output_vis_image_url":"vis.png"}}"#),
            ["o.png", "vis.png"]
        );
        assert_eq!(
            urls(r#"{"output":{"render_urls":["p1.png","p2.png"],"bg_urls":["bg.png"]}}"#),
            ["p1.png", "p2.png"]
        );
        assert_eq!(
            urls(
                r#"{"output":{"choices":[{"finish_reason":"stop","message":{"role":"assistant","content":[{"image":"c1.png","type":"image"},{"text":"caption"},{"image_url":"c2.png"}]}}]}}"#
            ),
            ["c1.png", "c2.png"]
        );
        assert!(urls(r#"{"output":{"results":null,"choices":null,"video_url":null}}"#).is_empty());
    }

    #[test]
    fn a_task_answer_reads_as_its_state() {
        let read = |answer: &str| observe(serde_json::from_str(answer).unwrap(), Media::Video);
        assert!(matches!(read(r#"{"output":{"task_id":"t","task_status":"RUNNING"}}"#), Observed::Running));
        let Observed::Succeeded { results, usage, .. } =
            read(r#"{"output":{"task_status":"SUCCEEDED","video_url":"v.mp4"},"usage":{"duration":5}}"#)
        else {
            panic!("not a success");
        };
        assert_eq!((results[0].url.as_str(), &*results[0].kind), ("v.mp4", "video"));
        assert_eq!(usage.map(|usage| usage.to_value()), Some(serde_json::json!({"duration": 5})));
        let Observed::Failed(error) =
            read(r#"{"output":{"task_status":"FAILED","code":"DataInspectionFailed","message":"no"}}"#)
        else {
            panic!("not a failure");
        };
        assert_eq!((error.code.as_str(), error.message.as_str()), ("DataInspectionFailed", "no"));
        assert!(matches!(read(r#"{"output":{"task_status":"CANCELED"}}"#), Observed::Cancelled));
    }

    /// The delivered counts a report's members say, each checked; the wrong type of an optional member
    /// (the tier, the sound) says nothing, of a count makes it unusable.
    #[test]
    fn a_usage_report_is_measured_in_the_domain_terms() {
        let measured = |text: &str| measure(&Usage::from(serde_json::from_str::<Value>(text).unwrap()));
        let video = measured(r#"{"duration": 10, "input_video_duration": 2, "SR": 720, "audio": false}"#);
        assert_eq!(
            (video.seconds, video.input_video_seconds, video.resolution.as_deref(), video.audio),
            (Reading::Count(10.0), Reading::Count(2.0), Some("720P"), Some(false))
        );
        assert_eq!(measured(r#"{"video_duration": 5}"#).seconds, Reading::Count(5.0));
        assert_eq!(measured(r#"{"duration": "ten", "video_duration": 5}"#).seconds, Reading::Unusable);
        assert_eq!(measured(r#"{"duration": -1}"#).seconds, Reading::Unusable);
        assert_eq!(measured(r#"{"SR": "x", "audio": 1}"#).resolution, None);
        assert_eq!(measured(r#"{"image_count": 2}"#).images, Reading::Count(2));
        assert_eq!(measured(r#"{"image_count": 1.5}"#).images, Reading::Unusable);
        assert_eq!(measured(r#"{"image_count": 1, "image_count": 3}"#).images, Reading::Count(3));
        assert_eq!(measured(r#"{"input_tokens": 10, "output_tokens": null}"#).output_tokens, Reading::Unusable);
        assert_eq!(measured("[1]"), Measured::default());
    }

    /// The raw output-token field, whose presence blocks the equivalent-usage projection: there at the top
    /// level, even as `null` or spelled with an escape, and nowhere else.
    #[test]
    fn a_raw_output_token_field_is_read_as_present_however_it_is_spelled() {
        let tokens = |text: &str| {
            let raw = serde_json::value::RawValue::from_string(text.to_string()).unwrap();
            measure(&Usage::from(&*raw)).output_tokens
        };
        for (text, absent) in [
            (r#"{"output_tokens":null}"#, false),
            (r#"{"output\u005ftokens":0}"#, false),
            (r#"{"output_tokens":"many"}"#, false),
            (r#"{"detail":{"output_tokens":1}}"#, true),
            (r#"{"image_count":1}"#, true),
            ("[1]", true),
        ] {
            assert_eq!(tokens(text) == Reading::Absent, absent, "{text}");
        }
    }
}
