//! The Rust the gateway `include!`s: typed request structs that render the upstream envelope, and the static
//! tables of operations, endpoints, routes and models.
//!
//! The generated code names only types of the gateway's `domain::catalog` module and its envelope builder
//! (`domain::catalog::envelope`), which are the runtime's side of this contract; the HTTP edge mounts the
//! endpoints from the tables.

use crate::Spec;
use crate::spec::{
    Audio, Envelope, Field, FieldType, Media, Model, Operation, Slot, SyncResponse, TaskMode, Transform,
};
use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use std::collections::BTreeMap;

/// The whole generated module, formatted.
pub fn generate(spec: &Spec) -> String {
    let op_ids: Vec<_> = spec.operations.keys().map(|n| type_ident(n, "")).collect();
    let op_names: Vec<&String> = spec.operations.keys().collect();
    let structs = spec.operations.values().map(request_types);
    let request_variants = spec.operations.keys().map(|n| {
        let id = type_ident(n, "");
        let ty = type_ident(n, "Request");
        quote! { #id(#ty) }
    });
    let parse_arms = spec.operations.keys().map(|n| {
        let id = type_ident(n, "");
        quote! { OperationId::#id => serde::Deserialize::deserialize(body).map(OperationRequest::#id) }
    });
    let render_arms = spec.operations.keys().map(|n| {
        let id = type_ident(n, "");
        quote! { OperationRequest::#id(request) => request.render(out) }
    });
    let operations = spec.operations.values().map(|op| operation_spec(spec, op));
    let endpoints = spec.endpoints.endpoints.iter().map(|e| {
        let (name, path, summary, status) = (&e.name, &e.path, &e.summary, e.async_status);
        let media = media(e.media);
        let ops = e.operations.iter().map(|o| type_ident(&o.value, ""));
        let sync = match e.sync_response {
            SyncResponse::Upstream => quote!(SyncResponse::Upstream),
            SyncResponse::ImagesStandard => quote!(SyncResponse::ImagesStandard),
        };
        quote! {
            EndpointSpec {
                name: #name, path: #path, summary: #summary, media: #media,
                operations: &[#(OperationId::#ops),*], async_status: #status, sync_response: #sync,
            }
        }
    });
    let routes = spec.upstream.routes.iter().map(|(name, r)| {
        let path = &r.path;
        let mode = task_mode(r.mode);
        let regions = r.regions.iter().map(|r| &r.value);
        quote! { RouteSpec { name: #name, path: #path, mode: #mode, regions: &[#(#regions),*] } }
    });
    let regions = spec.upstream.regions.keys();
    let wire = &spec.upstream.wire;
    let api_root = &wire.api_root.value;
    let header = |h: &crate::spec::WireHeader| {
        let (name, value) = (&h.name.value, &h.value.value);
        quote! { WireHeader { name: #name, value: #value } }
    };
    let (async_header, inspection_header) = (header(&wire.async_header), header(&wire.data_inspection_header));
    let size_tiers = spec.upstream.sizes.iter().map(|(tier, sizes)| quote! { (#tier, &[#(#sizes),*]) });
    let ratio_sizes = spec
        .upstream
        .ratio_sizes
        .iter()
        .flat_map(|(tier, ratios)| ratios.iter().map(move |(ratio, size)| quote! { (#tier, #ratio, #size) }));
    let models = spec.models.iter().map(|m| model_spec(spec, m));
    let transient = &spec.upstream.capacity.transient_failures;
    let tokens = quote! {
        use crate::domain::catalog::{Audio, BillingRule, EndpointSpec, Envelope, Media, ModelSpec, OperationSpec, PixelRange, RouteSpec, SyncResponse, TaskMode, TierPrice, TokenPrice, Transform, UpstreamWire, WireHeader};
        use crate::domain::catalog::envelope::{EnvelopeBuilder, FieldOut, RenderError, Slot};

        /// Every operation of the spec.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum OperationId { #(#op_ids),* }

        impl OperationId {
            /// The operation's name in the spec and on the wire.
            pub fn as_str(self) -> &'static str {
                match self { #(OperationId::#op_ids => #op_names),* }
            }
            /// Looks an operation up by name.
            pub fn parse(name: &str) -> Option<OperationId> {
                match name { #(#op_names => Some(OperationId::#op_ids),)* _ => None }
            }
            /// Its spec: fields, rules and schemas.
            pub fn spec(self) -> &'static OperationSpec {
                &OPERATIONS[self as usize]
            }
        }

        #(#structs)*

        /// A request of any operation, deserialized into its typed struct.
        #[derive(Debug, Clone)]
        pub enum OperationRequest { #(#request_variants),* }

        impl OperationRequest {
            /// Deserializes a validated body into the typed struct of `operation` (borrowed: the body stays
            /// the caller's, for pricing).
            pub fn parse(
                operation: OperationId,
                body: &serde_json::Map<String, serde_json::Value>,
            ) -> Result<OperationRequest, serde_json::Error> {
                match operation { #(#parse_arms),* }
            }
            /// Writes every field to its upstream place.
            pub fn render(&self, out: &mut EnvelopeBuilder<'_>) -> Result<(), RenderError> {
                match self { #(#render_arms),* }
            }
        }

        /// Operations, in `OperationId` order.
        pub static OPERATIONS: &[OperationSpec] = &[#(#operations),*];
        /// Public submit endpoints.
        pub static ENDPOINTS: &[EndpointSpec] = &[#(#endpoints),*];
        /// How the upstream spells its protocol.
        pub static WIRE: UpstreamWire = UpstreamWire {
            api_root: #api_root, async_header: #async_header, data_inspection_header: #inspection_header,
        };
        /// Upstream routes by name.
        pub static ROUTES: &[RouteSpec] = &[#(#routes),*];
        /// Codes of a FAILED upstream task worth sending again (on another upstream account).
        pub static TRANSIENT_FAILURES: &[&str] = &[#(#transient),*];
        /// Upstream regions.
        pub static REGIONS: &[&str] = &[#(#regions),*];
        /// Resolution tier -> its `W*H` sizes.
        pub static SIZE_TIERS: &[(&str, &[&str])] = &[#(#size_tiers),*];
        /// (tier, ratio, `W*H`) for models that take `resolution` + `ratio`.
        pub static RATIO_SIZES: &[(&str, &str, &str)] = &[#(#ratio_sizes),*];
        /// Every model record.
        pub static MODELS: &[ModelSpec] = &[#(#models),*];
        /// The published OpenAPI 3.1 document.
        pub static OPENAPI_JSON: &str = include_str!(concat!(env!("OUT_DIR"), "/schemas/openapi.json"));
    };
    let file: syn::File = match syn::parse2(tokens) {
        Ok(file) => file,
        Err(e) => panic!("codegen produced invalid Rust: {e}"),
    };
    format!("// @generated by mediagate-codegen from spec/. Do not edit.\n\n{}", prettyplease::unparse(&file))
}

fn type_ident(name: &str, suffix: &str) -> proc_macro2::Ident {
    let camel: String = name
        .split(['_', '-', '.'])
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map(|c| c.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
        })
        .collect();
    format_ident!("{camel}{suffix}")
}

fn field_ident(name: &str) -> proc_macro2::Ident {
    const KEYWORDS: &[&str] = &["type", "ref", "mod", "fn", "match", "move", "self", "use", "loop", "box", "async"];
    if KEYWORDS.contains(&name) { format_ident!("r#{name}") } else { format_ident!("{name}") }
}

/// The struct (or, for operations with variants, the enum of structs) of one operation.
fn request_types(op: &Operation) -> TokenStream {
    let name = type_ident(&op.operation, "Request");
    let doc = &op.summary;
    let Some(variants) = &op.variants else {
        return request_struct(&name, doc, op.open, &op.fields, None);
    };
    let tag = &variants.tag;
    let mut structs = Vec::new();
    let mut arms = Vec::new();
    let mut render = Vec::new();
    for (case, variant) in &variants.cases {
        let variant_ident = type_ident(case, "");
        let struct_ident = type_ident(&format!("{}_{case}", op.operation), "Request");
        let mut fields = op.fields.clone();
        fields.extend(variant.fields.clone());
        structs.push(request_struct(&struct_ident, &variant.summary, op.open, &fields, Some((tag, case))));
        arms.push(quote! { #[serde(rename = #case)] #variant_ident(#struct_ident) });
        render.push(quote! { #name::#variant_ident(request) => request.render(out) });
    }
    quote! {
        #[doc = #doc]
        #[derive(Debug, Clone, serde::Deserialize)]
        #[serde(tag = #tag)]
        pub enum #name { #(#arms),* }
        impl #name {
            /// Writes every field to its upstream place.
            pub fn render(&self, out: &mut EnvelopeBuilder<'_>) -> Result<(), RenderError> {
                match self { #(#render),* }
            }
        }
        #(#structs)*
    }
}

fn request_struct(
    name: &proc_macro2::Ident,
    doc: &str,
    open: bool,
    fields: &BTreeMap<String, Field>,
    tag: Option<(&String, &String)>,
) -> TokenStream {
    let deny = if open { quote!() } else { quote!(#[serde(deny_unknown_fields)]) };
    let members = fields.iter().map(|(fname, field)| {
        let ident = field_ident(fname);
        let ty = rust_type(field);
        let doc = &field.description;
        let rename = if ident != fname.as_str() { quote!(#[serde(rename = #fname)]) } else { quote!() };
        if field.required {
            quote! { #[doc = #doc] #rename pub #ident: #ty }
        } else {
            quote! { #[doc = #doc] #rename #[serde(default)] pub #ident: Option<#ty> }
        }
    });
    let puts = fields.iter().filter_map(|(fname, field)| {
        let placement = field.upstream.as_ref()?;
        if placement.to == Slot::None {
            return None;
        }
        let ident = field_ident(fname);
        let slot = slot(placement.to);
        let messages_slot = slot_or(placement.messages_to, placement.to);
        let upstream = placement.name.clone().unwrap_or_else(|| fname.clone());
        let transform = match placement.transform {
            Some(t) => { let t = transform(t); quote!(Some(#t)) }
            None => quote!(None),
        };
        let out = quote! {
            FieldOut { client: #fname, upstream: #upstream, slot: #slot, messages_slot: #messages_slot, transform: #transform }
        };
        Some(if field.required {
            quote! { out.put(&#out, &self.#ident)?; }
        } else {
            quote! { if let Some(value) = &self.#ident { out.put(&#out, value)?; } }
        })
    });
    let tag_put = tag.map(|(tag, case)| quote! { out.put_tag(#tag, #case); });
    quote! {
        #[doc = #doc]
        #[derive(Debug, Clone, serde::Deserialize)]
        #deny
        pub struct #name { #(#members),* }
        impl #name {
            /// Writes every field to its upstream place.
            pub fn render(&self, out: &mut EnvelopeBuilder<'_>) -> Result<(), RenderError> {
                #tag_put
                #(#puts)*
                Ok(())
            }
        }
    }
}

fn rust_type(field: &Field) -> TokenStream {
    match field.ty {
        Some(FieldType::String) => quote!(String),
        Some(FieldType::Integer) => quote!(i64),
        Some(FieldType::Number) => quote!(f64),
        Some(FieldType::Boolean) => quote!(bool),
        Some(FieldType::Object) => quote!(serde_json::Map<String, serde_json::Value>),
        Some(FieldType::Array) => match field.items.as_ref().and_then(|i| i.ty) {
            Some(FieldType::String) => quote!(Vec<String>),
            Some(FieldType::Integer) => quote!(Vec<i64>),
            Some(FieldType::Number) => quote!(Vec<f64>),
            _ => quote!(Vec<serde_json::Value>),
        },
        Some(FieldType::Media) | None => quote!(serde_json::Value),
    }
}

fn slot(s: Slot) -> TokenStream {
    match s {
        Slot::Input => quote!(Slot::Input),
        Slot::Parameters => quote!(Slot::Parameters),
        Slot::Content => quote!(Slot::Content),
        Slot::None => quote!(Slot::None),
    }
}

fn slot_or(s: Option<Slot>, fallback: Slot) -> TokenStream {
    slot(s.unwrap_or(fallback))
}

fn transform(t: Transform) -> TokenStream {
    match t {
        Transform::Uppercase => quote!(Transform::Uppercase),
        Transform::SizeToResolution => quote!(Transform::SizeToResolution),
        Transform::SizeToResolutionRatio => quote!(Transform::SizeToResolutionRatio),
    }
}

fn media(m: Media) -> TokenStream {
    match m {
        Media::Video => quote!(Media::Video),
        Media::Image => quote!(Media::Image),
    }
}

fn task_mode(m: TaskMode) -> TokenStream {
    match m {
        TaskMode::Sync => quote!(TaskMode::Sync),
        TaskMode::Async => quote!(TaskMode::Async),
    }
}

fn operation_spec(spec: &Spec, op: &Operation) -> TokenStream {
    let id = type_ident(&op.operation, "");
    let (name, summary) = (&op.operation, &op.summary);
    let media = media(op.media);
    let aliases = spec
        .all_fields(op)
        .into_iter()
        .flat_map(|(name, f)| f.aliases.iter().map(move |alias| quote! { (#alias, #name) }))
        .collect::<Vec<_>>();
    let tag = match &op.variants {
        Some(v) => {
            let t = &v.tag;
            quote!(Some(#t))
        }
        None => quote!(None),
    };
    let rules = crate::tables::rules_json(op);
    let published = format!("/schemas/published/operations/{name}.json");
    let all = spec.all_fields(op);
    let fields = all.keys().filter(|name| !spec.endpoints.submission_fields.contains_key(**name));
    let parameters = all
        .iter()
        .filter(|(_, f)| f.upstream.as_ref().is_some_and(|p| p.to == crate::spec::Slot::Parameters))
        .map(|(name, _)| name);
    quote! {
        OperationSpec {
            id: OperationId::#id, name: #name, summary: #summary, media: #media, variant_tag: #tag,
            aliases: &[#(#aliases),*],
            fields: &[#(#fields),*],
            parameters: &[#(#parameters),*],
            rules_json: #rules,
            published_schema: include_str!(concat!(env!("OUT_DIR"), #published)),
        }
    }
}

fn model_spec(spec: &Spec, m: &Model) -> TokenStream {
    let (id, code, summary, region) = (&m.id.value, &m.model_code, &m.summary, &m.region.value);
    let op = type_ident(&m.operation.value, "");
    let media = media(m.media);
    let mode = task_mode(m.task_mode);
    let route = spec.upstream.routes.keys().position(|r| *r == m.route.value).unwrap_or_default();
    let envelope = match m.envelope {
        Envelope::Plain => quote!(Envelope::Plain),
        Envelope::Messages => quote!(Envelope::Messages),
    };
    let audio = match m.audio {
        Audio::Always => quote!(Audio::Always),
        Audio::Optional => quote!(Audio::Optional),
        Audio::None => quote!(Audio::None),
    };
    let (enabled, free, deadline, expected) = (m.enabled, m.free_trial_only, m.deadline_seconds, m.expected_seconds);
    let concurrency = m.concurrency.unwrap_or(spec.upstream.capacity.concurrency);
    let inspection = m.data_inspection;
    let transforms = m.transforms.iter().map(|(f, t)| {
        let t = transform(*t);
        quote! { (#f, #t) }
    });
    let pixels = m.limits.iter().filter_map(|(f, l)| {
        let p = l.pixels?;
        let (a, b, c, d) = (p.min_pixels, p.max_pixels, p.min_aspect, p.max_aspect);
        Some(quote! { (#f, PixelRange { min_pixels: #a, max_pixels: #b, min_aspect: #c, max_aspect: #d }) })
    });
    let op_spec = &spec.operations[&m.operation.value];
    let defaults = crate::tables::defaults(spec, op_spec, m).into_iter().map(|(f, v, send)| quote! { (#f, #v, #send) });
    let billing = billing(m);
    let limits = crate::tables::limits_json(m);
    let canonical = format!("/schemas/canonical/models/{id}.json");
    let published = format!("/schemas/published/models/{id}.json");
    let published_schema = crate::schema::model_schema(spec, m, crate::schema::Flavor::Published);
    let version = published_schema["x-schema-version"].as_str().unwrap_or_default().to_string();
    quote! {
        ModelSpec {
            id: #id, model_code: #code, operation: OperationId::#op, media: #media, task_mode: #mode,
            region: #region, route: &ROUTES[#route], envelope: #envelope, summary: #summary,
            enabled: #enabled, free_trial_only: #free, audio: #audio, data_inspection: #inspection,
            deadline_seconds: #deadline, expected_seconds: #expected, concurrency: #concurrency,
            transforms: &[#(#transforms),*],
            pixel_limits: &[#(#pixels),*],
            defaults: &[#(#defaults),*],
            billing: #billing,
            limits_json: #limits,
            canonical_schema: include_str!(concat!(env!("OUT_DIR"), #canonical)),
            published_schema: include_str!(concat!(env!("OUT_DIR"), #published)),
            schema_version: #version,
        }
    }
}

fn billing(m: &Model) -> TokenStream {
    let b = &m.billing;
    let placeholder = b.placeholder;
    if let Some(tiers) = &b.per_second {
        let tiers = tiers.iter().map(|(tier, p)| {
            let audio = option(p.audio);
            let silent = option(p.silent);
            quote! { TierPrice { tier: #tier, audio: #audio, silent: #silent } }
        });
        quote! { BillingRule::PerSecond { placeholder: #placeholder, tiers: &[#(#tiers),*] } }
    } else if let Some(price) = b.per_image {
        quote! { BillingRule::PerImage { placeholder: #placeholder, price: #price } }
    } else if let Some(price) = b.per_call {
        quote! { BillingRule::PerCall { placeholder: #placeholder, price: #price } }
    } else if let Some(t) = &b.per_token {
        let (i, o, h) = (t.input_per_million, t.output_per_million, t.hold_output_tokens);
        quote! {
            BillingRule::PerToken { placeholder: #placeholder, price: TokenPrice { input_per_million: #i, output_per_million: #o, hold_output_tokens: #h } }
        }
    } else {
        quote! { BillingRule::PerCall { placeholder: true, price: 0 } }
    }
}

fn option(v: Option<u64>) -> TokenStream {
    match v {
        Some(v) => quote!(Some(#v)),
        None => quote!(None),
    }
}
