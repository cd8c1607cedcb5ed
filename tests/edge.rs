//! The HTTP edge against the real binary: models, auth, endpoint membership, validation and the error
//! envelope.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Demo, KEY};
use serde_json::{Value, json};

/// Every seed model of the service spec: (id, operation, type, endpoint).
const SEED: &[(&str, &str, &str, &str)] = &[
    ("alpha2.6-t2v_t2v", "t2v", "video", "/v1/videos/generations"),
    ("alpha2.5-t2v-preview_t2v", "t2v", "video", "/v1/videos/generations"),
    ("alpha2.2-t2v-plus_t2v", "t2v", "video", "/v1/videos/generations"),
    ("alphax2.1-t2v-turbo_t2v", "t2v", "video", "/v1/videos/generations"),
    ("alphax2.1-t2v-plus_t2v", "t2v", "video", "/v1/videos/generations"),
    ("alpha2.6-t2v-us_t2v", "t2v", "video", "/v1/videos/generations"),
    ("alpha2.6-i2v-flash_i2v", "i2v", "video", "/v1/videos/generations"),
    ("alpha2.6-i2v_i2v", "i2v", "video", "/v1/videos/generations"),
    ("alpha2.5-i2v-preview_i2v", "i2v", "video", "/v1/videos/generations"),
    ("alpha2.2-i2v-flash_i2v", "i2v", "video", "/v1/videos/generations"),
    ("alpha2.2-i2v-plus_i2v", "i2v", "video", "/v1/videos/generations"),
    ("alphax2.1-i2v-turbo_i2v", "i2v", "video", "/v1/videos/generations"),
    ("alphax2.1-i2v-plus_i2v", "i2v", "video", "/v1/videos/generations"),
    ("alpha2.6-i2v-us_i2v", "i2v", "video", "/v1/videos/generations"),
    ("alpha2.2-kf2v-flash_kf2v", "kf2v", "video", "/v1/videos/generations"),
    ("alphax2.1-kf2v-plus_kf2v", "kf2v", "video", "/v1/videos/generations"),
    ("alpha2.7-r2v", "r2v", "video", "/v1/videos/generations"),
    ("alpha2.6-r2v-flash_r2v", "r2v", "video", "/v1/videos/generations"),
    ("alpha2.6-r2v_r2v", "r2v", "video", "/v1/videos/generations"),
    ("alphax2.1-vace-plus_vace", "vace", "video", "/v1/videos/generations"),
    ("alpha2.1-vace-plus_vace", "vace", "video", "/v1/videos/generations"),
    ("beta-image-2.0-pro_t2i", "t2i", "image", "/v1/images/generations"),
    ("alphax-poster-generation-v1_poster", "poster", "image", "/v1/images/generations"),
    ("beta-image-plus", "t2i", "image", "/v1/images/generations"),
    ("alpha2.6-t2i", "t2i", "image", "/v1/images/generations"),
    ("beta-image-2.0-pro_i2i", "i2i", "image", "/v1/images/edits"),
    ("image-out-painting_outpaint", "outpaint", "image", "/v1/images/edits"),
    ("alphax-sketch-to-image-lite_sketch", "sketch", "image", "/v1/images/edits"),
    ("alphax-background-generation-v2_background", "background", "image", "/v1/images/edits"),
    ("alphax-style-repaint-v1_style_repaint", "style_repaint", "image", "/v1/images/edits"),
    ("alphax-virtualmodel_virtualmodel", "virtualmodel", "image", "/v1/images/edits"),
    ("virtualmodel-v2_virtualmodel", "virtualmodel", "image", "/v1/images/edits"),
    ("shoemodel-v1_shoemodel", "shoemodel", "image", "/v1/images/edits"),
    ("image-instance-segmentation_segmentation", "segmentation", "image", "/v1/images/edits"),
    ("image-erase-completion_erase", "erase", "image", "/v1/images/edits"),
    ("alphax-x-painting_xpainting", "xpainting", "image", "/v1/images/edits"),
];

const ENDPOINTS: &[&str] = &["/v1/videos/generations", "/v1/images/generations", "/v1/images/edits"];

#[test]
fn every_seed_model_is_listed_with_its_operation_type_and_endpoint() {
    let demo = Demo::start();
    let reply = demo.get("/v1/models");
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json["object"], "list");
    let data = reply.json["data"].as_array().unwrap();
    for (id, op, kind, endpoint) in SEED {
        let model = data.iter().find(|m| m["id"] == *id).unwrap_or_else(|| panic!("{id} missing"));
        assert_eq!(model["object"], "model", "{id}");
        assert_eq!(model["operation"], *op, "{id}");
        assert_eq!(model["type"], *kind, "{id}");
        assert_eq!(model["endpoint"], *endpoint, "{id}");
        assert!(model["task_mode"].is_string() && model["limits"].is_object(), "{id}");
        let one = demo.get(&format!("/v1/models/{id}"));
        assert_eq!(one.json["id"], *id);
        let schema = demo.get(&format!("/v1/models/{id}/schema"));
        assert_eq!(schema.status, 200);
        assert_eq!(schema.json["$schema"], "https://json-schema.org/draft/2020-12/schema");
        // Its version is its content's: in the schema, the listing and the ETag, which a client revalidates.
        let version = schema.json["x-schema-version"].as_str().unwrap();
        assert_eq!(version.len(), 16, "{id}");
        assert_eq!(model["schema_version"], version, "{id}");
        assert_eq!(schema.header("etag"), Some(format!("\"{version}\"").as_str()), "{id}");
        let auth = format!("Bearer {KEY}");
        let tag = format!("\"{version}\"");
        let path = format!("/v1/models/{id}/schema");
        let unchanged = demo.request("GET", &path, None, &[("Authorization", &auth), ("If-None-Match", &tag)]);
        assert_eq!(unchanged.status, 304, "{id}");
        let stale = demo.request("GET", &path, None, &[("Authorization", &auth), ("If-None-Match", "\"0\"")]);
        assert_eq!(stale.status, 200, "{id}");
    }
    assert_eq!(demo.get("/v1/models/nope").code(), "model_not_found");
    let openapi = demo.request("GET", "/openapi.json", None, &[]);
    assert_eq!(openapi.json["openapi"], "3.1.0");
    assert!(openapi.json["paths"]["/v1/images/edits"]["post"].is_object());
}

#[test]
fn each_wrong_endpoint_pairing_is_invalid_model_operation() {
    let demo = Demo::start();
    for (id, _, _, home) in SEED {
        for endpoint in ENDPOINTS.iter().filter(|e| *e != home) {
            let reply = demo.post(endpoint, &json!({"model": id, "prompt": "x"}));
            assert_eq!(reply.status, 400, "{id} on {endpoint}");
            assert_eq!(reply.code(), "invalid_model_operation", "{id} on {endpoint}");
            assert_eq!(reply.param(), "model");
        }
    }
}

#[test]
fn any_of_the_three_headers_authenticates() {
    let demo = Demo::start();
    let bearer = format!("Bearer {KEY}");
    for (name, value) in [("Authorization", bearer.as_str()), ("x-api-key", KEY), ("x-alt-api-key", KEY)] {
        let reply = demo.request("GET", "/v1/models", None, &[(name, value)]);
        assert_eq!(reply.status, 200, "{name}");
    }
    let missing = demo.request("GET", "/v1/models", None, &[]);
    assert_eq!((missing.status, missing.code()), (401, "missing_api_key"));
    let wrong = demo.request("GET", "/v1/models", None, &[("x-api-key", "nope")]);
    assert_eq!((wrong.status, wrong.code()), (401, "invalid_api_key"));
    // The key is checked before anything else, even a body that is not JSON.
    let unauth = demo.raw("POST", "/v1/videos/generations", Some("{"), "application/json", &[]);
    assert_eq!(unauth.code(), "missing_api_key");
}

#[test]
fn unreadable_bodies_each_get_their_own_4xx() {
    let demo = Demo::start();
    let auth = format!("Bearer {KEY}");
    let h = [("Authorization", auth.as_str())];
    let path = "/v1/videos/generations";
    let check = |reply: common::Reply, status: u16, code: &str| {
        assert_eq!((reply.status, reply.code()), (status, code), "{:?}", reply.json);
        assert!(reply.json["error"]["type"].as_str().is_some());
        let id = reply.header("x-request-id").unwrap();
        assert_eq!(reply.json["error"]["request_id"], id);
    };
    check(demo.raw("POST", path, Some("{not json"), "application/json", &h), 400, "invalid_json");
    check(demo.raw("POST", path, Some("{}"), "text/plain", &h), 415, "unsupported_media_type");
    let big = format!("{{\"model\":\"alpha2.6-t2v_t2v\",\"prompt\":\"{}\"}}", "a".repeat(11 * 1024 * 1024));
    check(demo.raw("POST", path, Some(&big), "application/json", &h), 413, "payload_too_large");
    check(demo.raw("POST", path, Some("[1,2]"), "application/json", &h), 400, "invalid_body");
    check(demo.raw("POST", path, Some("{\"prompt\":\"x\"}"), "application/json", &h), 400, "missing_model");
    let typed = demo.post(path, &json!({"model": "alpha2.6-t2v_t2v", "prompt": "x", "duration": "five"}));
    assert_eq!((typed.status, typed.code(), typed.param()), (400, "invalid_parameter", "duration"));
    check(demo.raw("GET", "/v1/nothing", None, "application/json", &h), 404, "not_found");
}

/// `(model, body, the field an error must name)`: one violating request per rule of the spec.
fn rule_cases() -> Vec<(&'static str, Value, &'static str)> {
    let png = "https://m.example/a.png";
    let mp4 = "https://m.example/a.mp4";
    vec![
        ("alpha2.6-t2v_t2v", json!({"prompt": "x", "duration": 40}), "duration"),
        ("alpha2.6-t2v_t2v", json!({"prompt": "x", "size": "1x1"}), "size"),
        ("alpha2.6-t2v_t2v", json!({"prompt": "x", "colour": "red"}), "colour"),
        ("alpha2.6-t2v_t2v", json!({"duration": 5}), "prompt"),
        ("alpha2.6-i2v_i2v", json!({"prompt": "x"}), "image_url"),
        ("alpha2.6-i2v_i2v", json!({"prompt": "x", "image_url": png, "img_url": png}), "img_url"),
        ("alpha2.6-i2v_i2v", json!({"prompt": "x", "img_url": png, "template": "flying"}), "template"),
        ("alpha2.2-kf2v-flash_kf2v", json!({"first_frame_url": png, "prompt": "x"}), "last_frame_url"),
        (
            "alpha2.6-r2v_r2v",
            json!({"prompt": "x", "reference_urls": [png, png, png, png, png, png]}),
            "reference_urls",
        ),
        ("alpha2.6-r2v_r2v", json!({"prompt": "x", "reference_urls": [mp4, mp4, mp4, mp4, png]}), "reference_urls"),
        ("alpha2.7-r2v", json!({"prompt": "x", "reference_urls": [png]}), "reference_urls"),
        ("alphax2.1-vace-plus_vace", json!({"prompt": "x"}), "function"),
        (
            "alphax2.1-vace-plus_vace",
            json!({"function": "image_reference", "prompt": "x", "ref_images_url": [png, png, png, png]}),
            "ref_images_url",
        ),
        (
            "alphax2.1-vace-plus_vace",
            json!({"function": "image_reference", "prompt": "x", "ref_images_url": [png, png], "obj_or_bg": ["obj"]}),
            "obj_or_bg",
        ),
        (
            "alphax2.1-vace-plus_vace",
            json!({"function": "video_repainting", "prompt": "x", "video_url": mp4}),
            "control_condition",
        ),
        ("beta-image-2.0-pro_i2i", json!({"prompt": "x", "images": []}), "images"),
        ("beta-image-2.0-pro_i2i", json!({"prompt": "x", "images": [png, png, png, png]}), "images"),
        ("alphax-poster-generation-v1_poster", json!({"title": "t".repeat(31), "prompt_text_zh": "x"}), "title"),
        ("alphax-style-repaint-v1_style_repaint", json!({"image_url": png, "style_index": -1}), "style_ref_url"),
        (
            "alphax-style-repaint-v1_style_repaint",
            json!({"image_url": png, "style_index": 3, "style_ref_url": png}),
            "style_index",
        ),
        (
            "alphax-background-generation-v2_background",
            json!({"image": png, "prompt": "x", "noise_level": 1000}),
            "noise_level",
        ),
        ("alpha2.6-t2i", json!({"prompt": "x", "size": "512*512"}), "size"),
        ("beta-image-plus", json!({"prompt": "x", "size": "1024*1024"}), "size"),
    ]
}

#[test]
fn each_rule_refuses_a_violating_request_naming_the_field() {
    let demo = Demo::start();
    for (model, mut body, param) in rule_cases() {
        body["model"] = json!(model);
        let endpoint = SEED.iter().find(|s| s.0 == model).unwrap().3;
        let reply = demo.post(endpoint, &body);
        assert_eq!(reply.status, 400, "{model} {body}: {:?}", reply.json);
        assert_eq!(reply.code(), "invalid_parameter", "{model} {body}");
        let named = reply.json["error"]["violations"]
            .as_array()
            .map(|v| v.iter().any(|v| v["param"].as_str().is_some_and(|p| p.starts_with(param))))
            .unwrap_or(false)
            || reply.param().starts_with(param);
        assert!(named, "{model}: expected `{param}` named in {}", reply.json);
    }
}

/// Every response names its request in `X-Request-Id`: a submission the id of its task (`vid-`, `img-`),
/// anything else an id of its own (`req-`), a new one each time.
#[test]
fn every_response_names_its_request() {
    let demo = Demo::start();
    let auth = format!("Bearer {KEY}");
    let h = [("Authorization", auth.as_str())];
    let id = |reply: &common::Reply| reply.header("x-request-id").unwrap().to_string();
    let (first, second) = (demo.request("GET", "/v1/models", None, &h), demo.request("GET", "/v1/models", None, &h));
    assert!(id(&first).starts_with("req-") && id(&first).len() == 36, "{}", id(&first));
    assert_ne!(id(&first), id(&second));
    let video = demo.post("/v1/videos/generations", &json!({"model": "alpha2.6-t2v_t2v", "prompt": "x"}));
    assert!(id(&video).starts_with("vid-"));
    assert_eq!(video.json["request_id"], id(&video));
    let image = demo.post("/v1/images/generations", &json!({"model": "beta-image-2.0-pro_t2i", "prompt": "x"}));
    assert_eq!(image.status, 200, "{:?}", image.json);
    assert!(id(&image).starts_with("img-"));
}

#[test]
fn a_known_path_asked_with_another_method_is_a_405_naming_the_allowed_ones() {
    let demo = Demo::start();
    let auth = format!("Bearer {}", common::KEY);
    let admin = format!("Bearer {}", common::ADMIN_TOKEN);
    let empty = json!({});
    for (method, path, allow, token) in [
        ("GET", "/v1/videos/generations", "POST", &auth),
        ("POST", "/v1/tasks/task-1", "GET", &auth),
        ("GET", "/v1/tasks/task-1/cancel", "POST", &auth),
        ("POST", "/v1/models", "GET", &auth),
        ("POST", "/healthz", "GET", &auth),
        ("GET", "/admin/v1/accounts/acme/top-up", "POST", &admin),
        ("POST", "/admin/v1/usage", "GET", &admin),
    ] {
        let body = (method == "POST").then_some(&empty);
        let reply = demo.request(method, path, body, &[("Authorization", token)]);
        assert_eq!((reply.status, reply.code()), (405, "method_not_allowed"), "{method} {path}: {:?}", reply.json);
        assert_eq!(reply.header("Allow"), Some(allow), "{method} {path}");
    }
    // Both methods of the key routes still reach their handlers.
    demo.account("acme", 0, 0, 0);
    assert_eq!(demo.admin("/accounts/acme/keys", None).status, 200);
}

#[test]
fn the_published_schema_and_the_gateway_agree_on_what_they_can_both_state() {
    let demo = Demo::start();
    let cases = [
        ("beta-image-2.0-pro_i2i", json!({"n": 2.0}), true),
        ("beta-image-2.0-pro_i2i", json!({"size": "0*0"}), false),
        ("beta-image-2.0-pro_i2i", json!({"size": "1024*01"}), false),
        ("beta-image-2.0-pro_i2i", json!({"n": 2.5}), false),
        ("beta-image-2.0-pro_t2i", json!({"n": 1.0, "size": "1024*1024"}), true),
        ("alpha2.6-t2v_t2v", json!({"duration": 5.0}), true),
    ];
    for (model, extra, valid) in cases {
        let mut body = common::examples().into_iter().find(|(stem, _)| stem == model).unwrap().1;
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let schema = demo.get(&format!("/v1/models/{model}/schema")).json;
        let published = jsonschema::validator_for(&schema).unwrap().is_valid(&body);
        let answer = demo.post(&common::endpoint_of(&demo, model), &body);
        let admitted = answer.status < 300;
        assert_eq!((published, admitted), (valid, valid), "{model} {extra}: {:?}", answer.json);
    }
}
