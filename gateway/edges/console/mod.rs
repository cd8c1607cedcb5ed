//! The console under `/console`: server-rendered pages for operators (signed in with the admin token) and
//! client teams (signed in with an API key), from the gateway's own binary.
//!
//! Every state change calls the same functions as the admin API (`http::admin`) or the public API
//! (`http::submit`, with the session's key as the caller), so the console adds no second path to money or
//! keys, and a client sees only what its key's account owns. Templates (`templates/`) are checked when the
//! crate compiles; charts are SVG drawn on the server; the one script is the playground's.

pub mod activity;
mod audit;
mod charts;
mod client;
mod forms;
mod models;
mod operator;
pub mod session;
mod tasks;
mod usage;
mod webhooks;

use crate::edges::web::error::ApiError;
use crate::services::auth::Caller;
use crate::services::runtime::Gateway;
use actix_web::http::{StatusCode, header};
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};
use askama::Template;
pub use session::Sessions;
use session::{Role, Session};

pub fn configure(cfg: &mut web::ServiceConfig) {
    // A person who opens the gateway's address in a browser lands in the console.
    cfg.route("/", web::get().to(index));
    cfg.service(
        web::scope("/console")
            // Pages and assets go gzipped to a browser that takes it; the API's routes are left as they are.
            .wrap(actix_web::middleware::Compress::default())
            .route("", web::get().to(index))
            .route("/", web::get().to(index))
            .route("/sign-in", web::get().to(sign_in_page))
            .route("/sign-in", web::post().to(sign_in))
            .route("/sign-out", web::post().to(sign_out))
            .route("/assets/{file}", web::get().to(asset))
            .configure(operator::configure)
            .configure(models::configure)
            .configure(usage::configure)
            .configure(webhooks::configure)
            .configure(audit::configure)
            .configure(tasks::configure)
            .configure(client::configure),
    );
}

/// What a page could not show: no session (to the sign-in page), or a refusal (its message, in a page).
pub enum Failure {
    SignedOut,
    Refused(ApiError),
}

impl From<ApiError> for Failure {
    fn from(error: ApiError) -> Failure {
        Failure::Refused(error)
    }
}

impl<E: crate::domain::errors::ErrorCode> From<E> for Failure {
    fn from(error: E) -> Failure {
        Failure::Refused(error.into())
    }
}

impl std::fmt::Debug for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::SignedOut => f.write_str("signed out"),
            Failure::Refused(error) => write!(f, "{}", error.message),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

impl ResponseError for Failure {
    fn status_code(&self) -> StatusCode {
        match self {
            Failure::SignedOut => StatusCode::SEE_OTHER,
            Failure::Refused(error) => crate::edges::web::error::status(error.code),
        }
    }

    fn error_response(&self) -> HttpResponse {
        match self {
            Failure::SignedOut => redirect("/console/sign-in"),
            Failure::Refused(error) => {
                let page = ErrorPage {
                    csrf: String::new(),
                    nav: Vec::new(),
                    notice: None,
                    heading: "That did not work",
                    message: &error.message,
                    back: "/console",
                };
                html(self.status_code(), &page)
            }
        }
    }
}

type Page = Result<HttpResponse, Failure>;

/// Who is looking: an operator, or a client as the caller of its key.
pub enum Viewer {
    Operator(Session),
    Client(Session, Caller),
}

const OPERATOR_NAV: &[(&str, &str)] = &[
    ("/console/overview", "Overview"),
    ("/console/accounts", "Accounts"),
    ("/console/tasks", "Tasks"),
    ("/console/usage", "Usage"),
    ("/console/models", "Models"),
    ("/console/webhooks", "Webhooks"),
    ("/console/audit", "Audit"),
];
const CLIENT_NAV: &[(&str, &str)] = &[
    ("/console/home", "Home"),
    ("/console/tasks", "Tasks"),
    ("/console/usage", "Usage"),
    ("/console/playground", "Playground"),
];

impl Viewer {
    /// The request's viewer: its session checked again (the admin token, or the API's key check).
    pub async fn of(state: &Gateway, req: &HttpRequest) -> Result<Viewer, Failure> {
        let session = session::of_request(req).ok_or(Failure::SignedOut)?;
        match session.role {
            Role::Operator { .. } => {
                let session = session::operator(state, session).await.map_err(|_| Failure::SignedOut)?;
                Ok(Viewer::Operator(session))
            }
            Role::Client { .. } => {
                let caller = session::client(state, &session).await?;
                Ok(Viewer::Client(session, caller))
            }
        }
    }

    pub fn session(&self) -> &Session {
        match self {
            Viewer::Operator(session) | Viewer::Client(session, _) => session,
        }
    }

    pub fn nav(&self) -> Vec<(&'static str, &'static str)> {
        match self {
            Viewer::Operator(_) => OPERATOR_NAV.to_vec(),
            Viewer::Client(..) => CLIENT_NAV.to_vec(),
        }
    }

    /// The one account a client may see; `None` for an operator, who sees every one.
    pub fn account(&self) -> Option<&str> {
        match self {
            Viewer::Operator(_) => None,
            Viewer::Client(_, caller) => Some(caller.account()),
        }
    }
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    csrf: String,
    nav: Vec<(&'static str, &'static str)>,
    notice: Option<String>,
    heading: &'static str,
    message: &'a str,
    back: &'static str,
}

#[derive(Template)]
#[template(path = "sign_in.html")]
struct SignInPage {
    csrf: String,
    nav: Vec<(&'static str, &'static str)>,
    notice: Option<String>,
    /// Why the last sign-in was refused, shown above the forms.
    refused: Option<String>,
}

/// Scripts and styles from the console only; results previewed from wherever their links point (the
/// gateway's own copies, or the upstream's); no page framed elsewhere.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; img-src 'self' https: http: data:; \
                                       media-src 'self' https: http:; frame-ancestors 'none'";

/// A rendered page; a template that fails to render is an internal error.
fn html(status: StatusCode, page: &impl Template) -> HttpResponse {
    match page.render() {
        Ok(body) => HttpResponse::build(status)
            .content_type("text/html; charset=utf-8")
            .insert_header((header::CACHE_CONTROL, "no-store"))
            .insert_header(("Content-Security-Policy", CONTENT_SECURITY_POLICY))
            .body(body),
        Err(e) => ApiError::internal(format!("console page: {e}")).error_response(),
    }
}

fn redirect(to: &str) -> HttpResponse {
    HttpResponse::SeeOther().insert_header((header::LOCATION, to)).finish()
}

/// Where a session's pages start.
fn home_of(session: Option<&Session>) -> &'static str {
    match session.map(|s| &s.role) {
        Some(Role::Operator { .. }) => "/console/overview",
        Some(Role::Client { .. }) => "/console/home",
        None => "/console/sign-in",
    }
}

async fn index(req: HttpRequest) -> HttpResponse {
    redirect(home_of(session::of_request(&req).as_ref()))
}

async fn sign_in_page() -> HttpResponse {
    html(StatusCode::OK, &SignInPage { csrf: String::new(), nav: Vec::new(), notice: None, refused: None })
}

#[derive(serde::Deserialize)]
struct SignIn {
    admin_token: Option<String>,
    api_key: Option<String>,
}

/// Checks what was presented as the admin API or the public API would, then starts a session.
async fn sign_in(state: web::Data<Gateway>, req: HttpRequest, form: web::Form<SignIn>) -> Page {
    session::cross_site_refused(&req)?;
    let form = form.into_inner();
    let role = match (form.admin_token.as_deref().map(str::trim), form.api_key.as_deref().map(str::trim)) {
        (Some(token), _) if !token.is_empty() => crate::services::operators::authenticate(&state, Some(token))
            .await
            .map(|_| Role::Operator { token_digest: crate::services::runtime::operators::digest(token) })
            .map_err(ApiError::from),
        (_, Some(key)) if !key.is_empty() => {
            let key_hash = crate::domain::tasks::hash_key(key);
            let caller = crate::services::auth::authenticate(&state, key_hash).await;
            caller.map(|_| Role::Client { key_hash }).map_err(ApiError::from)
        }
        _ => Err(ApiError::invalid_parameter("api_key", "Enter an API key or the admin token.")),
    };
    // A refusal is shown on the sign-in page itself, so the person can try again at once.
    let role = match role {
        Ok(role) => role,
        Err(refused) => {
            let page =
                SignInPage { csrf: String::new(), nav: Vec::new(), notice: None, refused: Some(refused.message) };
            return Ok(html(crate::edges::web::error::status(refused.code), &page));
        }
    };
    let sessions = req.app_data::<web::Data<Sessions>>().ok_or_else(|| ApiError::internal("no console sessions"))?;
    let cookie = sessions.start(&role, crate::domain::clock::now_ms() / 1000);
    let mut response = redirect(home_of(Some(&Session { role, csrf: String::new(), operator: None })));
    response.add_cookie(&cookie).map_err(|e| ApiError::internal(format!("console cookie: {e}")))?;
    Ok(response)
}

/// A form that changes nothing but carries the session's CSRF token.
#[derive(serde::Deserialize)]
pub struct CsrfForm {
    pub csrf: String,
}

async fn sign_out(req: HttpRequest, form: web::Form<CsrfForm>) -> Page {
    if let Some(session) = session::of_request(&req) {
        session::check_csrf(&req, &session, Some(&form.csrf))?;
    }
    let mut response = redirect("/console/sign-in");
    response.add_cookie(&session::ended()).map_err(|e| ApiError::internal(format!("console cookie: {e}")))?;
    Ok(response)
}

/// The stylesheet and the playground's script, compiled into the binary.
async fn asset(file: web::Path<String>) -> HttpResponse {
    let (body, content_type) = match file.as_str() {
        "console.css" => (include_str!("assets/console.css"), "text/css; charset=utf-8"),
        "console.js" => (include_str!("assets/console.js"), "text/javascript; charset=utf-8"),
        _ => return HttpResponse::NotFound().finish(),
    };
    HttpResponse::Ok()
        .content_type(content_type)
        .insert_header((header::CACHE_CONTROL, "public, max-age=3600"))
        .body(body)
}

/// Days typed in a filter (`YYYY-MM-DD`, empty for any) as epoch-ms bounds: from the local midnight that
/// starts `since` to the last moment of `until`.
fn days(since: &str, until: &str) -> Result<(Option<i64>, Option<i64>), ApiError> {
    let start = |field: &'static str, text: &str| match text.trim() {
        "" => Ok(None),
        day => crate::domain::clock::local_day_start_ms(day)
            .map(Some)
            .ok_or_else(|| ApiError::invalid_parameter(field, format!("`{field}` is a day, YYYY-MM-DD."))),
    };
    Ok((start("since", since)?, start("until", until)?.map(|start| start + 24 * 3600 * 1000 - 1)))
}

/// Money typed in a form (`12.5`, in units) as micro-units, checked.
fn micros(field: &'static str, text: &str) -> Result<i64, ApiError> {
    crate::domain::billing::amount::parse_units(text).map_err(|e| ApiError::invalid_parameter(field, e.message(field)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    #[test]
    fn money_in_a_form_is_units_and_a_refusal_names_the_field() {
        assert_eq!(super::micros("amount", "12.5").unwrap(), 12_500_000);
        let refused = super::micros("amount", "1,5").unwrap_err();
        assert_eq!(refused.param.as_deref(), Some("amount"));
        assert!(refused.message.contains("units"), "{}", refused.message);
    }
}
