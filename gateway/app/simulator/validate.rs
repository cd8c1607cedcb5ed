//! Per-model checks of an upstream body, answering like the upstream: 400 `InvalidParameter` naming the
//! parameter (docs/upstream-protocol.md sections 2 and 7).

use super::models::{Family, SimModel, tier_of_size};
use serde_json::Value;

/// `Err(message)` for the first problem found.
pub fn check(model: &SimModel, input: &Value, parameters: &Value) -> Result<(), String> {
    let invalid = |name: &str| Err(format!("Invalid parameter: {name}"));
    let has = |v: &Value, k: &str| v.get(k).is_some_and(|x| !x.is_null());
    // Ambiguous placements are accepted in both places.
    let get = |k: &str| input.get(k).or_else(|| parameters.get(k));
    if let Some(resolution) = parameters.get("resolution") {
        let tier = resolution.as_str().unwrap_or_default();
        if !model.resolutions.contains(&tier) {
            return invalid("resolution");
        }
    }
    if let Some(size) = parameters.get("size").and_then(Value::as_str)
        && model.video
    {
        if model.family == Family::Alpha27 {
            return invalid("size");
        }
        match tier_of_size(size) {
            Some(tier) if model.resolutions.contains(&tier) => {}
            _ => return invalid("size"),
        }
    }
    if let Some(duration) = parameters.get("duration") {
        let d = duration.as_i64().unwrap_or(-1);
        if model.video && !(model.durations.0..=model.durations.1).contains(&d) {
            return invalid("duration");
        }
    }
    if let Some(n) = parameters.get("n").or_else(|| input.get("generate_num")) {
        let n = n.as_i64().unwrap_or(0);
        if n < 1 || n > model.max_n {
            return invalid("n");
        }
    }
    if let Some(seed) = get("seed")
        && !seed.as_i64().is_some_and(|s| (0..=2_147_483_647).contains(&s))
    {
        return invalid("seed");
    }
    match model.family {
        Family::Alpha26 | Family::Alpha25 | Family::Alphax21 | Family::Alpha26I2v { .. }
            if model.route.contains("video-generation") =>
        {
            let i2v = model.code.contains("i2v");
            let r2v = model.code.contains("r2v");
            if i2v && !has(input, "img_url") {
                return invalid("img_url");
            }
            if r2v {
                let refs = input.get("reference_urls").and_then(Value::as_array);
                let Some(refs) = refs.filter(|r| !r.is_empty() && r.len() <= 5) else {
                    return invalid("reference_urls");
                };
                let videos = refs.iter().filter_map(Value::as_str).filter(|u| is_video(u)).count();
                if videos > 3 {
                    return invalid("reference_urls");
                }
            }
            if !i2v && !has(input, "prompt") {
                return invalid("prompt");
            }
            if has(input, "template") && !model.code.starts_with("alphax2.1-i2v") {
                return invalid("template");
            }
        }
        Family::Alpha27 => {
            let media = input.get("media").and_then(Value::as_array);
            let Some(media) = media.filter(|m| !m.is_empty() && m.len() <= 5) else { return invalid("media") };
            let first_frames = media.iter().filter(|m| m["type"] == "first_frame").count();
            let kinds_ok = media.iter().all(|m| {
                matches!(m["type"].as_str(), Some("reference_image" | "reference_video" | "first_frame"))
                    && m["url"].is_string()
            });
            if !kinds_ok || first_frames > 1 {
                return invalid("media");
            }
            if !has(input, "prompt") {
                return invalid("prompt");
            }
        }
        Family::Kf22 | Family::Alphax21 => {
            if !has(input, "first_frame_url") {
                return invalid("first_frame_url");
            }
            let template = has(input, "template");
            if template && model.family != Family::Alphax21 {
                return invalid("template");
            }
            if !template && !has(input, "last_frame_url") {
                return invalid("last_frame_url");
            }
        }
        Family::Vace => return vace(input, parameters),
        Family::Poster => {
            let title = input.get("title").and_then(Value::as_str).unwrap_or_default();
            if title.is_empty() || title.chars().count() > 30 {
                return invalid("title");
            }
            if !has(input, "prompt_text_zh") && !has(input, "prompt_text_en") {
                return invalid("prompt_text_zh");
            }
            if let Some(w) = input.get("wh_ratios")
                && !matches!(w.as_str(), Some("横版" | "竖版"))
            {
                return invalid("wh_ratios");
            }
        }
        Family::Choices => {
            let content = input.pointer("/messages/0/content").and_then(Value::as_array);
            let Some(content) = content else { return invalid("messages") };
            let texts = content.iter().filter(|c| c.get("text").is_some()).count();
            let images = content.iter().filter(|c| c.get("image").is_some()).count();
            if texts != 1 || images > 3 || (model.code == "alpha2.6-t2i" && images > 0) {
                return invalid("messages");
            }
        }
        _ => return image_tool(model, input, parameters),
    }
    Ok(())
}

fn is_video(url: &str) -> bool {
    let path = url.split('?').next().unwrap_or_default().to_ascii_lowercase();
    [".mp4", ".mov", ".avi", ".mkv", ".webm"].iter().any(|ext| path.ends_with(ext))
}

fn vace(input: &Value, parameters: &Value) -> Result<(), String> {
    let has = |k: &str| input.get(k).is_some_and(|x| !x.is_null());
    let invalid = |name: &str| Err(format!("Invalid parameter: {name}"));
    if !has("prompt") {
        return invalid("prompt");
    }
    match input.get("function").and_then(Value::as_str) {
        Some("image_reference") => {
            let refs = input.get("ref_images_url").and_then(Value::as_array).map_or(0, Vec::len);
            if !(1..=3).contains(&refs) {
                return invalid("ref_images_url");
            }
            if let Some(roles) = parameters.get("obj_or_bg").and_then(Value::as_array)
                && roles.len() != refs
            {
                return invalid("obj_or_bg");
            }
        }
        Some("video_repainting") => {
            if !has("video_url") {
                return invalid("video_url");
            }
            // The product spec's `posebodydepth` is not an upstream value; accepted anyway (ambiguous).
            let ok = ["posebodyface", "posebody", "posebodydepth", "depth", "scribble"];
            if !parameters.get("control_condition").and_then(Value::as_str).is_some_and(|c| ok.contains(&c)) {
                return invalid("control_condition");
            }
        }
        Some("video_edit") => {
            if !has("video_url") {
                return invalid("video_url");
            }
            if !has("mask_image_url") && !has("mask_video_url") {
                return invalid("mask_image_url");
            }
        }
        Some("video_extension") => {
            if !["first_clip_url", "last_clip_url", "first_frame_url", "last_frame_url"].iter().any(|k| has(k)) {
                return invalid("first_clip_url");
            }
        }
        Some("video_outpainting") => {
            if !has("video_url") {
                return invalid("video_url");
            }
        }
        _ => return invalid("function"),
    }
    Ok(())
}

fn image_tool(model: &SimModel, input: &Value, parameters: &Value) -> Result<(), String> {
    let has = |k: &str| input.get(k).is_some_and(|x| !x.is_null());
    let required: &[&str] = match model.code {
        "image-out-painting" | "image-instance-segmentation" => &["image_url"],
        "image-erase-completion" => &["image_url", "mask_url"],
        "alphax-style-repaint-v1" => &["image_url", "style_index"],
        "alphax-sketch-to-image-lite" => &["sketch_image_url", "prompt"],
        "alphax-background-generation-v2" => &["base_image_url"],
        "alphax-virtualmodel" | "virtualmodel-v2" => &["base_image_url", "prompt"],
        "shoemodel-v1" => &["template_image_url", "shoe_image_url"],
        "alphax-x-painting" => &["base_image_url", "mask_image_url", "prompt"],
        "beta-image-plus" => &["prompt"],
        _ => &[],
    };
    if let Some(missing) = required.iter().find(|k| !has(k)) {
        return Err(format!("Invalid parameter: {missing}"));
    }
    if model.code == "alphax-background-generation-v2" && !has("ref_image_url") && !has("ref_prompt") {
        return Err("Invalid parameter: ref_prompt".into());
    }
    if model.code == "alphax-style-repaint-v1"
        && input.get("style_index").and_then(Value::as_i64) == Some(-1)
        && !has("style_ref_url")
    {
        return Err("Invalid parameter: style_ref_url".into());
    }
    if model.code == "shoemodel-v1" && input.get("shoe_image_url").and_then(Value::as_array).is_none_or(|s| s.len() > 3)
    {
        return Err("Invalid parameter: shoe_image_url".into());
    }
    if model.code == "alphax-sketch-to-image-lite"
        && let Some(size) = parameters.get("size")
        && size != "768*768"
    {
        return Err("Invalid parameter: size".into());
    }
    if model.code == "beta-image-plus"
        && let Some(size) = parameters.get("size").and_then(Value::as_str)
        && !["1664*928", "1472*1104", "1328*1328", "1104*1472", "928*1664"].contains(&size)
    {
        return Err("Invalid parameter: size".into());
    }
    if model.code == "alphax-x-painting" {
        let url_only = ["base_image_url", "mask_image_url"].iter().all(|k| {
            input.get(*k).and_then(Value::as_str).is_some_and(|u| u.starts_with("http://") || u.starts_with("https://"))
        });
        if !url_only {
            return Err("Invalid parameter: base_image_url".into());
        }
    }
    Ok(())
}
