//! The OpenAPI 3.1 document of the whole public API.

use crate::Spec;
use crate::schema::{Flavor, model_schema};
use serde_json::{Map, Value, json};

/// Builds the document; request bodies are the published per-model schemas.
pub fn openapi(spec: &Spec) -> Value {
    let mut schemas = Map::new();
    for model in &spec.models {
        let mut schema = model_schema(spec, model, Flavor::Published);
        if let Value::Object(m) = &mut schema {
            m.remove("$schema");
        }
        schemas.insert(model.id.value.clone(), schema);
    }
    schemas.extend(response_schemas());
    let mut paths = Map::new();
    for endpoint in &spec.endpoints.endpoints {
        let refs: Vec<Value> = spec
            .models
            .iter()
            .filter(|m| endpoint.operations.iter().any(|o| o.value == m.operation.value))
            .map(|m| json!({"$ref": format!("#/components/schemas/{}", m.id.value)}))
            .collect();
        let accepted = endpoint.async_status.to_string();
        let mut responses = Map::new();
        responses.insert(accepted, json!({
            "description": "Accepted: an asynchronous task was created (synchronous models answer 200 with their result).",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TaskAcceptance"}}},
        }));
        if endpoint.async_status != 200 {
            responses.insert(
                "200".into(),
                json!({"description": "Result of a synchronous model.", "content": {"application/json": {}}}),
            );
        }
        responses.insert("default".into(), error_response());
        paths.insert(
            endpoint.path.clone(),
            json!({"post": {
                "operationId": endpoint.name,
                "summary": endpoint.summary,
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"oneOf": refs}}}},
                "responses": responses,
            }}),
        );
    }
    let query = |name: &str, description: &str, schema: Value| json!({"name": name, "in": "query", "required": false, "description": description, "schema": schema});
    paths.insert("/v1/tasks".into(), json!({"get": {
        "operationId": "list_tasks", "summary": "List the caller's tasks, newest first, a page at a time.",
        "parameters": [
            query("limit", "Tasks per page.", json!({"type": "integer", "minimum": 1, "maximum": 100, "default": 20})),
            query("after", "The `last_id` of the previous page: this page starts after that task.", json!({"type": "string"})),
            query("status", "Only tasks in this status.", json!({"type": "string", "enum": ["queued", "running", "success", "failed", "timeout", "cancelled"]})),
            query("model", "Only tasks of this model.", json!({"type": "string"})),
            query("created_since", "Only tasks created at or after this time, epoch milliseconds.", json!({"type": "integer"})),
            query("created_until", "Only tasks created at or before this time, epoch milliseconds.", json!({"type": "integer"})),
        ],
        "responses": {"200": {"description": "A page of tasks.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TaskList"}}}}, "default": error_response()},
    }}));
    paths.insert("/v1/tasks/{task_id}".into(), json!({"get": {
        "operationId": "get_task", "summary": "Read a task's state, results and usage.",
        "parameters": [task_id_param()],
        "responses": {"200": {"description": "The task.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Task"}}}}, "default": error_response()},
    }}));
    paths.insert("/v1/tasks/{task_id}/cancel".into(), json!({"post": {
        "operationId": "cancel_task", "summary": "Cancel a task the upstream has not started yet.",
        "parameters": [task_id_param()],
        "responses": {"200": {"description": "The cancelled task.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Task"}}}}, "default": error_response()},
    }}));
    let bytes = json!({"*/*": {"schema": {"type": "string", "format": "binary"}}});
    let download_headers = json!({
        "Content-Type": {"schema": {"type": "string"}}, "Content-Length": {"schema": {"type": "integer"}},
        "ETag": {"schema": {"type": "string"}}, "Content-Range": {"schema": {"type": "string"}},
    });
    let range = json!({"name": "Range", "in": "header", "required": false, "schema": {"type": "string"}, "description": "One byte range, e.g. `bytes=0-1023`."});
    let download_responses = json!({
        "200": {"description": "The file.", "headers": download_headers, "content": bytes},
        "206": {"description": "The range asked for.", "headers": download_headers, "content": bytes},
        "302": {"description": "On S3 with presigned downloads: the file's presigned URL, in `Location`."},
        "default": error_response(),
    });
    paths.insert("/v1/tasks/{task_id}/content".into(), json!({"get": {
        "operationId": "get_task_content", "summary": "Download a result of a succeeded task.",
        "parameters": [task_id_param(), query("index", "Which result, from 0.", json!({"type": "integer", "minimum": 0, "default": 0})), range],
        "responses": download_responses,
    }}));
    paths.insert("/v1/files/{task_id}/{index}".into(), json!({"get": {
        "operationId": "get_result_file", "summary": "Download a result by its signed link (a result's `url`): no key needed.",
        "security": [],
        "parameters": [
            task_id_param(),
            {"name": "index", "in": "path", "required": true, "schema": {"type": "integer", "minimum": 0}},
            query("expires", "The link's expiry, Unix seconds.", json!({"type": "integer"})),
            query("signature", "The gateway's signature of the link.", json!({"type": "string"})),
            range,
        ],
        "responses": download_responses,
    }}));
    paths.insert("/v1/models".into(), json!({"get": {
        "operationId": "list_models", "summary": "List enabled models.",
        "responses": {"200": {"description": "Models.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ModelList"}}}}, "default": error_response()},
    }}));
    paths.insert("/v1/models/{model}".into(), json!({"get": {
        "operationId": "get_model", "summary": "One enabled model.",
        "parameters": [{"name": "model", "in": "path", "required": true, "schema": {"type": "string"}}],
        "responses": {"200": {"description": "The model.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Model"}}}}, "default": error_response()},
    }}));
    paths.insert("/v1/models/{model}/schema".into(), json!({"get": {
        "operationId": "get_model_schema", "summary": "JSON Schema (draft 2020-12) of a request to this model.",
        "parameters": [{"name": "model", "in": "path", "required": true, "schema": {"type": "string"}}],
        "responses": {"200": {"description": "The schema.", "content": {"application/schema+json": {}}}, "default": error_response()},
    }}));
    json!({
        "openapi": "3.1.0",
        "info": {"title": "mediagate", "version": env!("CARGO_PKG_VERSION"), "description": "Video and image generation and editing behind one gateway."},
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "security": [{"bearer": []}, {"apiKey": []}, {"altApiKey": []}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
                "altApiKey": {"type": "apiKey", "in": "header", "name": "x-alt-api-key"},
            },
        },
    })
}

fn task_id_param() -> Value {
    json!({"name": "task_id", "in": "path", "required": true, "schema": {"type": "string"}})
}

fn error_response() -> Value {
    json!({"description": "Error.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
}

fn response_schemas() -> Map<String, Value> {
    let status = json!({"type": "string", "enum": ["queued", "running", "success", "failed", "timeout", "cancelled"]});
    let mut m = Map::new();
    m.insert("TaskList".into(), json!({
        "type": "object", "required": ["data", "has_more", "last_id"],
        "properties": {
            "data": {"type": "array", "items": {"$ref": "#/components/schemas/Task"}},
            "has_more": {"type": "boolean", "description": "Whether another page follows: ask it with `after=last_id`."},
            "last_id": {"type": ["string", "null"], "description": "The last task of this page; null when it is empty."},
        },
    }));
    m.insert("TaskAcceptance".into(), json!({
        "type": "object", "required": ["task_id", "request_id", "status", "message", "created_at"],
        "properties": {
            "task_id": {"type": "string"}, "request_id": {"type": "string"}, "status": status,
            "message": {"type": "string"}, "created_at": {"type": "string", "description": "Local time, YYYY-MM-DD HH:MM:SS."},
        },
    }));
    m.insert(
        "Task".into(),
        json!({
            "type": "object", "required": ["task_id", "status", "model", "operation", "created_at"],
            "properties": {
                "task_id": {"type": "string"}, "request_id": {"type": "string"}, "status": status,
                "model": {"type": "string"}, "operation": {"type": "string"}, "type": {"type": "string"},
                "created_at": {"type": "string"}, "updated_at": {"type": "string"}, "finished_at": {"type": "string"},
                "results": {"type": "array", "items": {"type": "object", "properties": {
                    "url": {"type": "string", "description": "The gateway's signed link (no key needed) until `expires_at`; the upstream's URL if mirroring is off or failed."},
                    "type": {"type": "string"}, "expires_at": {"type": "string"},
                    "size": {"type": "integer", "description": "Bytes, once the file is copied."},
                    "content_type": {"type": "string"},
                    "sha256": {"type": "string", "description": "Lowercase hex; also the download's ETag."}}}},
                "mirror": {"type": "object", "required": ["status"], "properties": {
                    "status": {"enum": ["pending", "mirrored", "failed"]},
                    "error": {"type": "string", "description": "Why the copy failed (the results keep the upstream's URLs)."}}},
                "usage": {"type": "object"},
                "settlement": {"type": "object"},
                "error": {"type": "object", "properties": {"code": {"type": "string"}, "message": {"type": "string"}}},
                "equivalent_usage": {"$ref": "#/components/schemas/EquivalentUsage"},
            },
        }),
    );
    m.insert(
        "EquivalentUsage".into(),
        json!({
            "type": "object", "required": ["usage_basis"],
            "properties": {"usage_basis": {"const": "price_equivalent"}, "output_tokens": {"type": "integer"}},
        }),
    );
    m.insert("Model".into(), json!({
        "type": "object", "required": ["id", "object", "type", "operation", "endpoint", "task_mode"],
        "properties": {
            "id": {"type": "string"}, "object": {"const": "model"}, "type": {"enum": ["video", "image"]},
            "operation": {"type": "string"}, "endpoint": {"type": "string"}, "task_mode": {"enum": ["sync", "async"]},
            "owned_by": {"type": "string"}, "free_trial_only": {"type": "boolean"}, "limits": {"type": "object"},
        },
    }));
    m.insert("ModelList".into(), json!({
        "type": "object", "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": {"$ref": "#/components/schemas/Model"}}},
    }));
    m.insert(
        "Error".into(),
        json!({
            "type": "object", "required": ["error"],
            "properties": {"error": {"type": "object", "required": ["message", "type", "code"], "properties": {
                "message": {"type": "string"}, "type": {"type": "string"}, "code": {"type": "string"},
                "param": {"type": ["string", "null"]}, "request_id": {"type": "string"}}}},
        }),
    );
    m
}
