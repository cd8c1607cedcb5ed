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
    schemas.extend(webhook_schemas());
    schemas.extend(admin_schemas());
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
    paths.insert("/v1/quotes".into(), json!({"post": {
        "operationId": "create_quote",
        "summary": "What a job would cost the caller's account, checked exactly as its submission would be (the same errors); nothing is run, stored or held.",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {
            "type": "object", "required": ["request"], "additionalProperties": false,
            "properties": {
                "endpoint": {"type": "string", "description": "The submit route the job would go to; the model's own when left out."},
                "request": {"type": "object", "description": "The body the job would be submitted with."},
            },
        }}}},
        "responses": {"200": {"description": "The quote.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Quote"}}}}, "default": error_response()},
    }}));
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
        "responses": {
            "200": {"description": "The schema; its `ETag` is its `x-schema-version`.", "content": {"application/schema+json": {}}},
            "304": {"description": "`If-None-Match` named the current version: the schema has not changed."},
            "default": error_response(),
        },
    }}));
    paths.extend(admin_paths());
    json!({
        "openapi": "3.1.0",
        "info": {"title": "mediagate", "version": env!("CARGO_PKG_VERSION"), "description": "Video and image generation and editing behind one gateway."},
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "security": [{"bearer": []}, {"apiKey": []}, {"altApiKey": []}],
        "tags": [{"name": "admin", "description": "The back office's API under `/admin/v1`: accounts, their money and keys, the usage log, tasks, models, the ledger check and webhooks. Every route takes the admin token; money is in micro-units (1e-6 of the currency)."}],
        "paths": paths,
        "webhooks": {"taskEnded": task_ended()},
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
                "altApiKey": {"type": "apiKey", "in": "header", "name": "x-alt-api-key"},
                "adminToken": {"type": "http", "scheme": "bearer", "description": "The admin token the gateway was started with (`MEDIAGATE_ADMIN_TOKEN`, the operator `root`), or a named operator's token (`POST /admin/v1/operators`). Each change is on the audit trail under its operator."},
            },
        },
    })
}

/// What the gateway POSTs to a task's `callback_url` (else its account's endpoint) when the task ends: a
/// Standard Webhooks delivery, so the receiver's side of the exchange is described here, not a route.
fn task_ended() -> Value {
    let header = |name: &str, description: &str, schema: Value| json!({"name": name, "in": "header", "required": true, "description": description, "schema": schema});
    json!({"post": {
        "operationId": "task_ended",
        "summary": "A task ended: sent at least once, signed with the account's webhook secrets.",
        // The delivery carries its signature, not a key of the receiver's.
        "security": [],
        "parameters": [
            header("webhook-id", "The message id, the same on every retry of a delivery: drop duplicates by it.", json!({"type": "string", "pattern": "^msg_"})),
            header("webhook-timestamp", "When this attempt was sent, Unix seconds.", json!({"type": "integer"})),
            header("webhook-signature", "`v1,<base64 HMAC-SHA256 of id.timestamp.body>`, one per secret not retired, space-separated.", json!({"type": "string"})),
        ],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TaskEvent"}}}},
        "responses": {
            "2XX": {"description": "Acknowledged: the delivery is done."},
            "410": {"description": "Gone: the endpoint is disabled, and nothing more is sent to it until it is set again."},
            "default": {"description": "Anything else, or no answer within 15 s, is retried on the `webhooks.retry_delays_ms` schedule (by default after 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and 10 h); after the last retry the delivery has failed."},
        },
    }})
}

/// An operation of the admin API: tagged `admin`, under the admin token, errors in the envelope.
fn admin(mut operation: Value) -> Value {
    operation["tags"] = json!(["admin"]);
    operation["security"] = json!([{"adminToken": []}]);
    operation["responses"]["default"] = error_response();
    operation
}

/// Responses with one JSON answer of the component `schema`, under `status`.
fn answer(status: &str, description: &str, schema: &str) -> Value {
    let schema = json!({"$ref": format!("#/components/schemas/{schema}")});
    json!({status: {"description": description, "content": {"application/json": {"schema": schema}}}})
}

fn ok(description: &str, schema: &str) -> Value {
    answer("200", description, schema)
}

fn account_param() -> Value {
    json!({"name": "account", "in": "path", "required": true, "schema": {"type": "string"}})
}

/// A JSON request body of this schema.
fn json_body(schema: Value) -> Value {
    json!({"required": true, "content": {"application/json": {"schema": schema}}})
}

/// The most micro-units an admin route takes: the gateway's `billing::MAX_MICROS` (tests/admin_openapi.rs
/// checks that the two agree).
const MAX_MICROS: i64 = 10_000_000_000_000_000;

/// The admin API: accounts, their money and keys, the usage log, tasks, models, the ledger check, and the
/// webhook routes.
fn admin_paths() -> Map<String, Value> {
    let account = account_param();
    let amount = |description: &str| {
        json_body(json!({
            "type": "object", "additionalProperties": false, "required": ["amount"],
            "properties": {
                "amount": {"type": "integer", "minimum": 1, "maximum": MAX_MICROS, "description": description},
                "note": {"type": "string", "default": "", "description": "Kept on the ledger entry."},
            },
        }))
    };
    let mut paths = Map::new();
    paths.insert("/admin/v1/accounts".into(), json!({
        "get": admin(json!({
            "operationId": "admin_list_accounts",
            "summary": "List accounts in name order, a page at a time, with their funds and when each last submitted a task.",
            "parameters": [
                query("search", "Only accounts whose name contains this, in any case.", json!({"type": "string"})),
                query("after", "The `last_name` of the previous page: this page starts after that account.", json!({"type": "string"})),
                query("limit", "Accounts per page.", json!({"type": "integer", "minimum": 1, "maximum": 100, "default": 100})),
            ],
            "responses": ok("A page of accounts.", "AccountList"),
        })),
        "post": admin(json!({
            "operationId": "admin_create_account",
            "summary": "Open an account with its first webhook secret; an existing name is not an error and answers its view (without the secret).",
            "requestBody": json_body(json!({
                "type": "object", "additionalProperties": false, "required": ["name"],
                "properties": {"name": {"type": "string", "minLength": 1, "description": "Trimmed; 1 to 128 bytes, no control characters."}},
            })),
            "responses": answer("201", "The account; `webhook_secret` only if it was opened now.", "AccountView"),
        })),
    }));
    paths.insert(
        "/admin/v1/accounts/{account}".into(),
        json!({"get": admin(json!({
            "operationId": "admin_get_account",
            "summary": "One account: its record, funds and keys.",
            "parameters": [account],
            "responses": ok("The account.", "AccountDetail"),
        }))}),
    );
    paths.insert(
        "/admin/v1/accounts/{account}/top-up".into(),
        json!({"post": admin(json!({
            "operationId": "admin_top_up",
            "summary": "Add money to the account's balance.",
            "parameters": [account],
            "requestBody": amount("Micro-units to add to the balance."),
            "responses": ok("The account now.", "AccountView"),
        }))}),
    );
    paths.insert("/admin/v1/accounts/{account}/plan".into(), json!({"post": admin(json!({
        "operationId": "admin_set_plan",
        "summary": "Set the account's plan; its plan pot is set to the allowance (not added to).",
        "parameters": [account],
        "requestBody": json_body(json!({
            "type": "object", "additionalProperties": false, "required": ["name", "allowance"],
            "properties": {
                "name": {"type": "string", "description": "The plan's name."},
                "allowance": {"type": "integer", "minimum": 0, "maximum": MAX_MICROS, "description": "Micro-units: the plan pot's new amount."},
            },
        })),
        "responses": ok("The account now.", "AccountView"),
    }))}));
    paths.insert("/admin/v1/accounts/{account}/weight".into(), json!({"post": admin(json!({
        "operationId": "admin_set_weight",
        "summary": "Set the account's share of the upstream's slots while its tasks wait for one (every account starts at 1).",
        "parameters": [account],
        "requestBody": json_body(json!({
            "type": "object", "additionalProperties": false, "required": ["weight"],
            "properties": {"weight": {"type": "integer", "minimum": 1, "maximum": 100, "description": "The share against an account of weight 1."}},
        })),
        "responses": ok("The account now.", "AccountView"),
    }))}));
    paths.insert("/admin/v1/accounts/{account}/free-trial".into(), json!({"post": admin(json!({
        "operationId": "admin_grant_free_trial",
        "summary": "Add money to the account's free trial (spent first, and the only money free-trial-only models take).",
        "parameters": [account],
        "requestBody": amount("Micro-units to add to the free trial."),
        "responses": ok("The account now.", "AccountView"),
    }))}));
    paths.insert(
        "/admin/v1/accounts/{account}/keys".into(),
        json!({
            "get": admin(json!({
                "operationId": "admin_list_keys",
                "summary": "The account's keys, revoked ones too, by prefix only.",
                "parameters": [account],
                "responses": ok("The keys.", "KeyList"),
            })),
            "post": admin(json!({
                "operationId": "admin_issue_key",
                "summary": "Issue a new key for the account; no body. The key is shown once: only its hash is kept.",
                "parameters": [account],
                "responses": answer("201", "The new key.", "IssuedKey"),
            })),
        }),
    );
    paths.insert("/admin/v1/accounts/{account}/keys/{prefix}/revoke".into(), json!({"post": admin(json!({
        "operationId": "admin_revoke_key",
        "summary": "Revoke the account's live keys that start with `prefix`; none is a 404.",
        "parameters": [account, {
            "name": "prefix", "in": "path", "required": true, "description": "A key's prefix as the key list shows it, or longer.",
            "schema": {"type": "string", "minLength": 8},
        }],
        "responses": ok("How many keys were revoked.", "RevokedKeys"),
    }))}));
    paths.insert(
        "/admin/v1/accounts/{account}/keys/revoke-all".into(),
        json!({"post": admin(json!({
            "operationId": "admin_revoke_all_keys",
            "summary": "Revoke every live key of the account; none is a 404.",
            "parameters": [account],
            "responses": ok("How many keys were revoked.", "RevokedKeys"),
        }))}),
    );
    let line = json!({"$ref": "#/components/schemas/UsageLine"});
    paths.insert("/admin/v1/usage".into(), json!({"get": admin(json!({
        "operationId": "admin_usage",
        "summary": "The usage log: one line per settled task, oldest first, dated when the task ended.",
        "parameters": [
            query("account", "Only this account's lines.", json!({"type": "string"})),
            query("model", "Only this model's lines.", json!({"type": "string"})),
            query("since", "Only lines dated at or after this time, epoch milliseconds.", json!({"type": "integer"})),
            query("until", "Only lines dated at or before this time, epoch milliseconds.", json!({"type": "integer"})),
            query("format", "JSON lines or CSV.", json!({"type": "string", "enum": ["jsonl", "csv"], "default": "jsonl"})),
        ],
        "responses": {"200": {
            "description": "With `format=jsonl`, one `UsageLine` object per line (the schema is of each line); with `format=csv`, a header row and one row per line, `units` and `by_source` as JSON.",
            "content": {
                "application/x-ndjson": {"schema": line},
                "text/csv": {"schema": {"type": "string"}},
            },
        }},
    }))}));
    paths.insert(
        "/admin/v1/tasks/{task_id}".into(),
        json!({"get": admin(json!({
            "operationId": "admin_get_task",
            "summary": "Any account's task, with its account, key, upstream id and money.",
            "parameters": [task_id_param()],
            "responses": ok("The task.", "AdminTask"),
        }))}),
    );
    let model = json!({"name": "model", "in": "path", "required": true, "schema": {"type": "string"}});
    paths.insert(
        "/admin/v1/models".into(),
        json!({"get": admin(json!({
            "operationId": "admin_list_models",
            "summary": "Every model of the catalog, enabled or not, with its pricing rule.",
            "responses": ok("Models.", "AdminModelList"),
        }))}),
    );
    paths.insert("/admin/v1/models/{model}/{switch}".into(), json!({"post": admin(json!({
        "operationId": "admin_switch_model",
        "summary": "Turn a model on or off on every replica; a disabled model is not listed to clients and takes no submissions.",
        "parameters": [model, {"name": "switch", "in": "path", "required": true, "schema": {"type": "string", "enum": ["enable", "disable"]}}],
        "responses": ok("The model and whether it is now enabled.", "ModelSwitch"),
    }))}));
    paths.insert("/admin/v1/ledger/verify".into(), json!({"get": admin(json!({
        "operationId": "admin_verify_ledger",
        "summary": "Check the books: every pot equals the sum of its entries and is not negative, and every task's money adds up.",
        "responses": ok("What the check found.", "LedgerCheck"),
    }))}));
    paths.extend(admin_webhook_paths());
    paths.extend(admin_audit_paths());
    paths
}

/// The admin API's webhook routes: an account's secret and default endpoint, and the deliveries.
fn admin_webhook_paths() -> Map<String, Value> {
    let account = account_param();
    let mut paths = Map::new();
    paths.insert("/admin/v1/accounts/{account}/webhook-secret".into(), json!({"post": admin(json!({
        "operationId": "admin_rotate_webhook_secret",
        "summary": "Give the account a new webhook secret, shown once; the one it replaces signs too until it retires.",
        "parameters": [account],
        "responses": ok("The new secret.", "WebhookSecret"),
    }))}));
    paths.insert("/admin/v1/accounts/{account}/webhook-endpoint".into(), json!({"post": admin(json!({
        "operationId": "admin_set_webhook_endpoint",
        "summary": "Set where the ends of the account's tasks without a `callback_url` go (the account needs a webhook secret).",
        "parameters": [account],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {
            "type": "object", "additionalProperties": false,
            "properties": {"url": {"type": ["string", "null"], "description": "http or https, not a private, loopback or link-local address; `null` for nowhere. Setting a disabled endpoint again enables it."}},
        }}}},
        "responses": ok("The account's endpoint now.", "WebhookEndpoint"),
    }))}));
    paths.insert("/admin/v1/webhooks/deliveries".into(), json!({"get": admin(json!({
        "operationId": "admin_list_webhook_deliveries",
        "summary": "List deliveries, newest first, with every attempt.",
        "parameters": [
            query("account", "Only this account's deliveries.", json!({"type": "string"})),
            query("task_id", "Only this task's deliveries.", json!({"type": "string"})),
            query("state", "Only deliveries in this state.", json!({"$ref": "#/components/schemas/DeliveryState"})),
            query("limit", "Deliveries at most.", json!({"type": "integer", "minimum": 1, "maximum": 1000, "default": 100})),
        ],
        "responses": ok("Deliveries.", "DeliveryList"),
    }))}));
    paths.insert("/admin/v1/webhooks/deliveries/{id}/replay".into(), json!({"post": admin(json!({
        "operationId": "admin_replay_webhook_delivery",
        "summary": "Send a delivery again now, whatever became of it, with the same `webhook-id` (its attempts are kept).",
        "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
        "responses": ok("The delivery, pending again.", "Delivery"),
    }))}));
    paths
}

/// The admin API's operators and audit trail.
fn admin_audit_paths() -> Map<String, Value> {
    let name = json!({"name": "name", "in": "path", "required": true, "schema": {"type": "string"}});
    let mut paths = Map::new();
    paths.insert("/admin/v1/operators".into(), json!({
        "get": admin(json!({
            "operationId": "admin_list_operators",
            "summary": "Every named operator, revoked ones included (never a token).",
            "responses": ok("The operators, by name.", "OperatorList"),
        })),
        "post": admin(json!({
            "operationId": "admin_create_operator",
            "summary": "Create a named operator with a token of its own, shown once. Root (the admin token) only.",
            "requestBody": json_body(json!({
                "type": "object", "additionalProperties": false, "required": ["name"],
                "properties": {"name": {"type": "string", "pattern": "^[a-z0-9._-]{1,64}$", "description": "Never reused once taken; `root` and `local` are reserved."}},
            })),
            "responses": answer("201", "The operator and its token.", "NewOperator"),
        })),
    }));
    paths.insert(
        "/admin/v1/operators/{name}/revoke".into(),
        json!({"post": admin(json!({
            "operationId": "admin_revoke_operator",
            "summary": "Revoke a named operator: its token stops working at once, on every replica. Root only.",
            "parameters": [name],
            "responses": ok("The operator, revoked.", "RevokedOperator"),
        }))}),
    );
    let action = json!({"$ref": "#/components/schemas/AuditAction"});
    let entry = json!({"$ref": "#/components/schemas/AuditEntry"});
    paths.insert("/admin/v1/audit".into(), json!({"get": admin(json!({
        "operationId": "admin_audit",
        "summary": "The audit trail: every change an operator made, oldest first. Entries are never changed or removed.",
        "parameters": [
            query("operator", "Only this operator's changes (`root` for the admin token).", json!({"type": "string"})),
            query("action", "Only changes of this kind.", action),
            query("account", "Only changes to this account.", json!({"type": "string"})),
            query("via", "Only changes made through this edge.", json!({"$ref": "#/components/schemas/AuditVia"})),
            query("since", "Only changes at or after this time, epoch milliseconds.", json!({"type": "integer"})),
            query("until", "Only changes at or before this time, epoch milliseconds.", json!({"type": "integer"})),
            query("after", "The entries after this `seq` (the page before's `last_seq`).", json!({"type": "integer", "minimum": 0})),
            query("limit", "Entries at most, per page.", json!({"type": "integer", "minimum": 1, "maximum": 1000, "default": 100})),
            query("format", "A page of JSON, or every entry kept as JSON lines.", json!({"type": "string", "enum": ["json", "jsonl"], "default": "json"})),
        ],
        "responses": {"200": {
            "description": "With `format=json`, a page; with `format=jsonl`, one `AuditEntry` per line (the schema is of each line).",
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/AuditPage"}},
                "application/x-ndjson": {"schema": entry},
            },
        }},
    }))}));
    paths
}

fn query(name: &str, description: &str, schema: Value) -> Value {
    json!({"name": name, "in": "query", "required": false, "description": description, "schema": schema})
}

fn task_id_param() -> Value {
    json!({"name": "task_id", "in": "path", "required": true, "schema": {"type": "string"}})
}

fn error_response() -> Value {
    json!({"description": "Error.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
}

/// What a price is for (`Units` of the billing).
fn units() -> Value {
    json!({"type": "object", "description": "What the price is for; only the units that apply.", "properties": {
        "seconds": {"type": "number"}, "resolution": {"type": "string"}, "audio": {"type": "boolean"},
        "images": {"type": "integer"}, "calls": {"type": "integer"},
        "input_tokens": {"type": "integer"}, "output_tokens": {"type": "integer"}}})
}

fn response_schemas() -> Map<String, Value> {
    let status = json!({"type": "string", "enum": ["queued", "running", "success", "failed", "timeout", "cancelled"]});
    let mut m = Map::new();
    m.insert("QueuePlace".into(), json!({
        "type": "object", "required": ["position", "ahead_of_you_seconds_estimate"],
        "description": "Present while the task waits for an upstream slot (every upstream account runs as many tasks of its model as it may): it is sent when one frees, fairly across accounts, first come first served within one.",
        "properties": {
            "position": {"type": "integer", "minimum": 1, "description": "Its place in line for its model, 1 next."},
            "ahead_of_you_seconds_estimate": {"type": "integer", "minimum": 0, "description": "Roughly how long until it is sent, from the model's typical run time and the slots there are."},
        },
    }));
    let units = units();
    m.insert("QuotedPrice".into(), json!({
        "type": "object", "required": ["amount", "units"],
        "description": "The list price the task was quoted at submission, and held: the most its settlement charges.",
        "properties": {"amount": {"type": "integer", "description": "Micro-units (1e-6 of the currency)."}, "units": units},
    }));
    m.insert("Quote".into(), json!({
        "type": "object", "required": ["model", "endpoint", "amount", "units", "free_trial_only", "funding", "fundable", "short_by"],
        "description": "What a job would cost the caller's account now; nothing was run, stored or held.",
        "properties": {
            "model": {"type": "string"}, "endpoint": {"type": "string", "description": "The submit route it was checked for."},
            "amount": {"type": "integer", "description": "The list price in micro-units: held at submission, the most a settlement charges."},
            "units": units,
            "free_trial_only": {"type": "boolean", "description": "Only the free-trial grant may pay for this model."},
            "funding": {"type": "array", "description": "The pots that would pay, in funding order.", "items": {
                "type": "object", "required": ["pot", "amount"],
                "properties": {"pot": {"enum": ["free_trial", "plan", "balance"]}, "amount": {"type": "integer"}}}},
            "fundable": {"type": "boolean", "description": "Whether the account can pay it now (what tasks in flight hold set aside)."},
            "short_by": {"type": "integer", "description": "What the pots cannot cover, in micro-units; 0 when fundable."},
        },
    }));
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
            "queue": {"$ref": "#/components/schemas/QueuePlace"},
            "quote": {"$ref": "#/components/schemas/QuotedPrice"},
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
                "failed_results": {"type": "array", "description": "A partial success: the items the upstream could not make, and why.",
                    "items": {"type": "object", "required": ["index", "code", "message"], "properties": {
                        "index": {"type": "integer", "description": "The item's place in the upstream's list, from 0."},
                        "code": {"type": "string"}, "message": {"type": "string"}}}},
                "mirror": {"type": "object", "required": ["status"], "properties": {
                    "status": {"enum": ["pending", "mirrored", "failed"]},
                    "error": {"type": "string", "description": "Why the copy failed (the results keep the upstream's URLs)."}}},
                "usage": {"type": "object"},
                "quote": {"$ref": "#/components/schemas/QuotedPrice"},
                "trace_id": {"type": "string", "description": "The job's OpenTelemetry trace (32 hex digits), when the gateway exports traces."},
                "settlement": {"type": "object"},
                "error": {"type": "object", "properties": {"code": {"type": "string"}, "message": {"type": "string"}}},
                "equivalent_usage": {"$ref": "#/components/schemas/EquivalentUsage"},
                "queue": {"$ref": "#/components/schemas/QueuePlace"},
                "attempts": {"type": "array", "description": "Present when the task was sent upstream more than once (the upstream failed it for its own reasons and it was sent again): each sending in order.",
                    "items": {"type": "object", "required": ["key", "started_at"], "properties": {
                        "key": {"type": "integer", "description": "Which of the region's upstream keys it went to, by index."},
                        "started_at": {"type": "string"},
                        "failed": {"type": "string", "description": "The upstream's code for the failure that made it go again."}}}},
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
            "schema_version": {"type": "string", "description": "The request schema's `x-schema-version` (a hash of its content): it changes whenever the schema does."},
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

fn webhook_schemas() -> Map<String, Value> {
    let event = json!({"type": "string", "enum": ["task.success", "task.failed", "task.timeout", "task.cancelled"]});
    let mut m = Map::new();
    m.insert("TaskEvent".into(), json!({
        "type": "object", "required": ["type", "timestamp", "data"],
        "properties": {
            "type": event,
            "timestamp": {"type": "string", "format": "date-time", "description": "When this attempt was sent: RFC 3339 in UTC, with milliseconds."},
            "data": {"$ref": "#/components/schemas/Task", "description": "The task as `GET /v1/tasks/{task_id}` answers it when this attempt is sent."},
        },
    }));
    m.insert("WebhookSecret".into(), json!({
        "type": "object", "required": ["account", "secret", "note", "old_secrets_retire_at_ms"],
        "properties": {
            "account": {"type": "string"},
            "secret": {"type": "string", "pattern": "^whsec_", "description": "Shown once."},
            "note": {"type": "string"},
            "old_secrets_retire_at_ms": {"type": "array", "items": {"type": "integer"}, "description": "When each secret it replaces stops signing, epoch milliseconds."},
        },
    }));
    m.insert(
        "WebhookEndpoint".into(),
        json!({
            "type": "object", "required": ["account", "endpoint"],
            "properties": {"account": {"type": "string"}, "endpoint": {"type": ["string", "null"]}},
        }),
    );
    let schema = |name: &str| json!({"$ref": format!("#/components/schemas/{name}")});
    let operator = json!({
        "type": "object", "required": ["name", "prefix", "created_at_ms", "created_by", "revoked_at_ms"],
        "properties": {
            "name": {"type": "string"},
            "prefix": {"type": "string", "description": "The token's first characters (`mgop-…`), to tell tokens apart."},
            "created_at_ms": {"type": "integer"},
            "created_by": {"type": "string"},
            "revoked_at_ms": {"type": ["integer", "null"]},
        },
    });
    m.insert("Operator".into(), operator);
    m.insert(
        "OperatorList".into(),
        json!({
            "type": "object", "required": ["data"],
            "properties": {"data": {"type": "array", "items": schema("Operator")}},
        }),
    );
    m.insert(
        "NewOperator".into(),
        json!({
            "type": "object", "required": ["operator", "token", "note"],
            "properties": {
                "operator": schema("Operator"),
                "token": {"type": "string", "pattern": "^mgop-", "description": "Shown once."},
                "note": {"type": "string"},
            },
        }),
    );
    m.insert(
        "RevokedOperator".into(),
        json!({
            "type": "object", "required": ["operator"], "properties": {"operator": schema("Operator")},
        }),
    );
    m.insert(
        "AuditVia".into(),
        json!({
            "enum": ["api", "cli", "console"],
            "description": "The edge a change came through: the admin API, `mediagate admin`, or the console.",
        }),
    );
    m.insert("AuditAction".into(), json!({
        "type": "string",
        "enum": ["account.open", "balance.top_up", "free_trial.grant", "plan.set", "weight.set", "key.issue", "key.revoke", "model.switch", "webhook.secret_rotate", "webhook.endpoint_set", "delivery.replay", "operator.create", "operator.revoke"],
    }));
    m.insert("AuditEntry".into(), json!({
        "type": "object", "required": ["seq", "at_ms", "operator", "via", "action", "account", "target", "before", "after"],
        "properties": {
            "seq": {"type": "integer", "description": "Its place in the trail, increasing in the order changes were written."},
            "at_ms": {"type": "integer"},
            "operator": {"type": "string", "description": "`root` (the admin token), a named operator, or `local` (a command on the data directory)."},
            "via": schema("AuditVia"),
            "action": schema("AuditAction"),
            "account": {"type": ["string", "null"]},
            "target": {"type": ["string", "null"], "description": "A key's prefix, a model, a delivery or an operator, where the change is about one."},
            "before": {"description": "What the change touched, as it was (null where there was nothing); a secret only by fingerprint."},
            "after": {"description": "What the change touched, as it is."},
        },
    }));
    m.insert(
        "AuditPage".into(),
        json!({
            "type": "object", "required": ["data", "has_more", "last_seq"],
            "properties": {
                "data": {"type": "array", "items": schema("AuditEntry")},
                "has_more": {"type": "boolean"},
                "last_seq": {"type": ["integer", "null"], "description": "The next page's `after`."},
            },
        }),
    );
    m.insert("DeliveryState".into(), json!({
        "type": "string", "enum": ["pending", "delivered", "failed", "disabled"],
        "description": "`pending`: waiting for its next attempt; `delivered`: an attempt got a 2xx; `failed`: every attempt of the schedule failed; `disabled`: its endpoint answered 410.",
    }));
    m.insert("Delivery".into(), json!({
        "type": "object", "required": ["id", "account", "task_id", "event", "url", "created_ms", "state", "next_attempt_ms", "attempts", "replays"],
        "properties": {
            "id": {"type": "string", "description": "`msg_…`: the `webhook-id` of every attempt."},
            "account": {"type": "string"}, "task_id": {"type": "string"}, "event": event, "url": {"type": "string"},
            "created_ms": {"type": "integer"},
            "state": {"$ref": "#/components/schemas/DeliveryState"},
            "next_attempt_ms": {"type": "integer", "description": "When a pending delivery is next attempted, epoch milliseconds."},
            "attempts": {"type": "array", "items": {
                "type": "object", "required": ["at_ms", "status", "error"],
                "properties": {
                    "at_ms": {"type": "integer"},
                    "status": {"type": ["integer", "null"], "description": "The endpoint's HTTP status, if it answered."},
                    "error": {"type": ["string", "null"], "description": "Why the attempt failed, if it did."},
                },
            }},
            "replays": {"type": "integer", "description": "How often an operator asked for it to be sent again."},
        },
    }));
    m.insert(
        "DeliveryList".into(),
        json!({
            "type": "object", "required": ["deliveries"],
            "properties": {"deliveries": {"type": "array", "items": {"$ref": "#/components/schemas/Delivery"}}},
        }),
    );
    m
}

/// The admin API's answers. Money is in micro-units (1e-6 of the currency).
fn admin_schemas() -> Map<String, Value> {
    let schema = |name: &str| json!({"$ref": format!("#/components/schemas/{name}")});
    let local_time = |description: &str| json!({"type": "string", "description": format!("{description} Local time, YYYY-MM-DD HH:MM:SS.")});
    let pot = json!({"enum": ["free_trial", "plan", "balance"]});
    let per_pot = |description: &str| {
        json!({"type": "array", "description": format!("{description}, as `[pot, micro-units]` pairs in funding order."), "items": {
            "type": "array", "prefixItems": [pot.clone(), {"type": "integer"}], "items": false, "minItems": 2}})
    };
    let or_null = |schema: Value| json!({"anyOf": [schema, {"type": "null"}]});
    let mut m = Map::new();
    m.insert("Funds".into(), json!({
        "type": "object", "required": ["free_trial", "plan", "balance"],
        "description": "An account's pots in micro-units, in funding order: the free trial is spent first, then the plan, then the balance.",
        "properties": {"free_trial": {"type": "integer"}, "plan": {"type": "integer"}, "balance": {"type": "integer"}},
    }));
    m.insert("Account".into(), json!({
        "type": "object", "required": ["name", "created_at", "plan", "queue_weight"],
        "properties": {
            "name": {"type": "string"},
            "created_at": local_time("When it was opened."),
            "plan": {"type": ["string", "null"], "description": "The plan's name; null until one is set."},
            "queue_weight": {"type": ["integer", "null"], "minimum": 1, "maximum": 100, "description": "Its share of the upstream's slots while its tasks wait for one; null until set, which counts as 1."},
        },
    }));
    let view = |keys: bool| {
        let mut view = json!({
            "type": "object", "required": ["account", "funds", "earmarked"],
            "properties": {
                "account": schema("Account"),
                "funds": {"$ref": "#/components/schemas/Funds", "description": "What the account may spend now: each pot less what its tasks in flight hold."},
                "earmarked": {"$ref": "#/components/schemas/Funds", "description": "What tasks in flight have set aside in memory rather than on the ledger, per pot (left out of `funds`)."},
            },
        });
        if keys {
            view["required"] = json!(["account", "funds", "earmarked", "keys"]);
            view["properties"]["keys"] = json!({"type": "array", "items": schema("ApiKey")});
        } else {
            view["properties"]["webhook_secret"] = json!({"type": "string", "pattern": "^whsec_", "description": "Only in the answer that opened the account: its first webhook secret, shown once."});
        }
        view
    };
    m.insert("AccountView".into(), view(false));
    m.insert("AccountDetail".into(), view(true));
    m.insert("AccountSummary".into(), json!({
        "type": "object", "required": ["name", "created_at", "plan", "funds", "last_task_at"],
        "properties": {
            "name": {"type": "string"}, "created_at": local_time("When it was opened."),
            "plan": {"type": ["string", "null"]},
            "funds": {"$ref": "#/components/schemas/Funds", "description": "What the account may spend now."},
            "last_task_at": {"type": ["string", "null"], "description": "When it last submitted a task, local time; null if never."},
        },
    }));
    m.insert("AccountList".into(), json!({
        "type": "object", "required": ["data", "has_more", "last_name"],
        "properties": {
            "data": {"type": "array", "items": schema("AccountSummary")},
            "has_more": {"type": "boolean", "description": "Whether another page follows: ask it with `after=last_name`."},
            "last_name": {"type": ["string", "null"], "description": "The last account of this page; null when it is empty."},
        },
    }));
    m.insert(
        "ApiKey".into(),
        json!({
            "type": "object", "required": ["account", "prefix", "created_at", "revoked"],
            "properties": {
                "account": {"type": "string"},
                "prefix": {"type": "string", "description": "The key's first 8 characters, safe to show and log."},
                "created_at": local_time("When it was issued."),
                "revoked": {"type": "boolean"},
            },
        }),
    );
    m.insert("KeyList".into(), json!({
        "type": "object", "required": ["keys"], "properties": {"keys": {"type": "array", "items": schema("ApiKey")}},
    }));
    m.insert(
        "IssuedKey".into(),
        json!({
            "type": "object", "required": ["account", "key", "note"],
            "properties": {
                "account": {"type": "string"},
                "key": {"type": "string", "pattern": "^mg-", "description": "The key itself, shown once."},
                "note": {"type": "string"},
            },
        }),
    );
    m.insert("RevokedKeys".into(), json!({
        "type": "object", "required": ["revoked"],
        "properties": {"revoked": {"type": "integer", "minimum": 1, "description": "How many live keys were revoked."}},
    }));
    m.insert("UsageLine".into(), json!({
        "type": "object",
        "required": ["at", "at_ms", "account", "key_prefix", "model", "operation", "task_id", "request_id", "status", "created_at", "units", "list_price", "charged", "by_source"],
        "description": "A settled task's line of the usage log.",
        "properties": {
            "at": local_time("When the task ended."),
            "at_ms": {"type": "integer", "description": "When the task ended, epoch milliseconds."},
            "account": {"type": "string"}, "key_prefix": {"type": "string"}, "model": {"type": "string"},
            "operation": {"type": "string"}, "task_id": {"type": "string"}, "request_id": {"type": "string"},
            "status": {"type": "string", "enum": ["success", "failed", "timeout", "cancelled"]},
            "created_at": local_time("When the task was submitted."),
            "units": units(),
            "list_price": {"type": "integer", "description": "The list price of what was delivered."},
            "charged": {"type": "integer", "description": "What the account was charged."},
            "by_source": {"type": "object", "description": "What each pot paid of `charged`; only the pots that paid.", "properties": {
                "free_trial": {"type": "integer"}, "plan": {"type": "integer"}, "balance": {"type": "integer"}}},
        },
    }));
    m.insert("Settlement".into(), json!({
        "type": "object", "required": ["outcome", "charged", "list_price", "by_pot", "units", "ledger_seq"],
        "description": "How a task's hold ended.",
        "properties": {
            "outcome": {"enum": ["posted", "voided"], "description": "`posted`: what was delivered is charged; `voided`: nothing is."},
            "charged": {"type": "integer"},
            "list_price": {"type": "integer", "description": "The list price of what was delivered."},
            "by_pot": per_pot("What each pot paid"),
            "units": units(),
            "ledger_seq": {"type": ["integer", "null"], "description": "An earmarked task's first ledger entry number; null otherwise."},
        },
    }));
    m.insert("TaskBilling".into(), json!({
        "type": "object", "required": ["quoted", "units", "hold", "earmarked", "baseline", "settlement"],
        "description": "A task's money.",
        "properties": {
            "quoted": {"type": "integer", "description": "The list price of the request as submitted."},
            "units": units(),
            "hold": per_pot("What was set aside"),
            "earmarked": {"type": "boolean", "description": "The hold was set aside in memory, not written to the ledger."},
            "baseline": {"type": "integer", "description": "The equivalent-usage baseline at submission, micro-units per million tokens."},
            "settlement": or_null(schema("Settlement")),
        },
    }));
    m.insert("AdminTask".into(), json!({
        "description": "A task as `GET /v1/tasks/{task_id}` answers it, and what only the back office sees.",
        "allOf": [schema("Task"), {
            "type": "object", "required": ["account", "key_prefix", "upstream_task_id", "billing"],
            "properties": {
                "account": {"type": "string"},
                "key_prefix": {"type": "string", "description": "The prefix of the key that submitted it."},
                "upstream_task_id": {"type": ["string", "null"], "description": "The upstream's id of it, once it was sent."},
                "billing": or_null(schema("TaskBilling")),
            },
        }],
    }));
    m.insert("BillingRule".into(), json!({
        "type": "object", "required": ["basis", "placeholder"],
        "description": "A model's pricing rule, in micro-units: `tiers` for `per_second`, `price` for `per_image` and `per_call`, the two prices per million tokens for `per_token`.",
        "properties": {
            "basis": {"enum": ["per_second", "per_image", "per_call", "per_token"]},
            "placeholder": {"type": "boolean", "description": "The price is a placeholder until the real one is set."},
            "tiers": {"type": "object", "description": "Price per second by resolution tier, with and without audio; null where the tier has no such price.", "additionalProperties": {
                "type": "object", "required": ["audio", "silent"],
                "properties": {"audio": {"type": ["integer", "null"]}, "silent": {"type": ["integer", "null"]}}}},
            "price": {"type": "integer"},
            "input_per_million": {"type": "integer"},
            "output_per_million": {"type": "integer"},
        },
    }));
    m.insert(
        "AdminModel".into(),
        json!({
            "description": "A model as `GET /v1/models` shows it, and what only the back office sees.",
            "allOf": [schema("Model"), {
                "type": "object", "required": ["created", "region", "summary", "billing_basis", "enabled", "billing"],
                "properties": {
                    "created": {"type": "integer"}, "region": {"type": "string"}, "summary": {"type": "string"},
                    "billing_basis": {"enum": ["per_second", "per_image", "per_call", "per_token"]},
                    "enabled": {"type": "boolean"},
                    "billing": schema("BillingRule"),
                },
            }],
        }),
    );
    m.insert(
        "AdminModelList".into(),
        json!({
            "type": "object", "required": ["object", "data"],
            "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": schema("AdminModel")}},
        }),
    );
    m.insert(
        "ModelSwitch".into(),
        json!({
            "type": "object", "required": ["model", "enabled"],
            "properties": {"model": {"type": "string"}, "enabled": {"type": "boolean"}},
        }),
    );
    m.insert("LedgerCheck".into(), json!({
        "type": "object", "required": ["entries", "accounts", "problems"],
        "properties": {
            "entries": {"type": "integer", "description": "Ledger entries checked."},
            "accounts": {"type": "integer", "description": "Accounts with entries."},
            "problems": {"type": "array", "items": {"type": "string"}, "description": "What is wrong, in words; empty when the books add up."},
        },
    }));
    m
}
