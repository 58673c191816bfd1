//! What each request gets. The path is decoded here, strictly: a segment that
//! decodes to a `/`, a NUL, a control character, `.` or `..`, or an empty segment
//! is refused (400); only then does the library resolve the identifier. An item's
//! files are served only when its manifests list them (`files`), so nothing else
//! under a collection (`.ibi`, `.ibip`, staging, earlier versions) is reachable.

use std::sync::Arc;

use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use ibi::ops::resolution::{self, BrowseQuery, ItemView, Resolution};
use percent_encoding::percent_decode_str;

use super::common::{blocking, compressed, refuse, short, Raw};
use super::{files, pages, zipped, App};

/// The longest path accepted (a name is under 200 characters; a file path inside a bag rarely near this).
const MAX_PATH: usize = 4096;
/// Items per browse page.
const PER_PAGE: usize = 50;

pub fn router(app: Arc<App>) -> Router {
    use tower_http::compression::CompressionLayer;
    use tower_http::set_header::SetResponseHeaderLayer;
    let not_raw =
        |_: StatusCode, _: axum::http::Version, _: &HeaderMap, ext: &axum::http::Extensions| ext.get::<Raw>().is_none();
    // Pages are compressed and timed by tower-http's layers; the item route (files,
    // the hot path) compresses its pages itself (`compressed`) and times only the
    // store calls that may wait on a network (`short`).
    Router::new()
        .route("/", get(browse))
        .route("/api/handles/{*id}", get(api_handles))
        .route("/.well-known/ibi/witness", get(witness_latest))
        .route("/.well-known/ibi/witness/{*name}", get(witness_proof))
        .route("/.well-known/ibi/ocfl/{*id}", get(ocfl_object))
        .route_layer(CompressionLayer::new().compress_when(not_raw))
        .route_layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            super::RESPONSE_TIMEOUT,
        ))
        .fallback(item_route)
        .with_state(app)
        .layer(SetResponseHeaderLayer::overriding(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")))
        .layer(SetResponseHeaderLayer::if_not_present(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(PAGE_POLICY),
        ))
}

/// What a page may load: its own inline style, nothing else.
const PAGE_POLICY: &str =
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; frame-ancestors 'none'";

/// Whether the client prefers JSON to HTML.
pub fn wants_json(headers: &HeaderMap) -> bool {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    accept.contains("application/json") && !accept.contains("text/html")
}

/// The base URL for links and Handle values: `--public-url`, or from the Host header.
pub fn url_base(app: &App, headers: &HeaderMap) -> String {
    if let Some(url) = &app.public_url {
        return url.clone();
    }
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("localhost");
    let plain = host.bytes().all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b));
    format!("http://{}/", if plain && !host.is_empty() { host } else { "localhost" })
}

/// Decodes a raw path into its segments, refusing anything that could mean another
/// place than it says.
pub fn segments(raw: &str) -> Result<Vec<String>, String> {
    if raw.len() > MAX_PATH {
        return Err(format!("the path is longer than {MAX_PATH} bytes"));
    }
    let inner = raw.strip_prefix('/').unwrap_or(raw);
    inner
        .split('/')
        .map(|segment| {
            let decoded = percent_decode_str(segment)
                .decode_utf8()
                .map_err(|_| "the path is not UTF-8 once decoded".to_string())?;
            if decoded.is_empty() || decoded == "." || decoded == ".." {
                return Err(format!("the path has an empty, \".\" or \"..\" segment ({segment:?})"));
            }
            if decoded.contains('/') || decoded.contains('\\') || decoded.chars().any(char::is_control) {
                return Err(format!("the segment {segment:?} decodes to a slash, backslash or control character"));
            }
            Ok(decoded.into_owned())
        })
        .collect()
}

/// What a path asks for: an identifier as written, what follows it, and whether it ends in `.zip`.
struct Asked {
    identifier: String,
    rest: Vec<String>,
    zip: bool,
    /// The path ended in a slash (`/NAME/`): the item as a folder.
    folder: bool,
}

impl Asked {
    /// An identifier alone: no file after it, no zip.
    fn nothing_more() -> Asked {
        Asked { identifier: String::new(), rest: Vec::new(), zip: false, folder: false }
    }
}

fn split_identifier(mut parts: Vec<String>) -> Option<Asked> {
    let ibip_like = parts.len() >= 2 && !parts[0].contains('.');
    let take = if ibip_like { 2 } else { 4 };
    if parts.len() < take {
        return None;
    }
    let mut zip = false;
    if parts.len() == take {
        if let Some(stem) = parts[take - 1].strip_suffix(".zip") {
            parts[take - 1] = stem.to_string();
            zip = true;
        }
    }
    let rest = parts.split_off(take);
    Some(Asked { identifier: parts.join("/"), rest, zip, folder: false })
}

async fn item_route(State(app): State<Arc<App>>, request: Request) -> Response {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = refuse(StatusCode::METHOD_NOT_ALLOWED, "method", "this server only reads: GET or HEAD");
        response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    let uri = request.uri().clone();
    // `/NAME/` is the item as a folder (what a mirroring tool makes of it).
    let (path, folder) = match uri.path().strip_suffix('/') {
        Some(path) if !path.is_empty() => (path, true),
        _ => (uri.path(), false),
    };
    let parts = match segments(path) {
        Ok(parts) => parts,
        Err(why) => return refuse(StatusCode::BAD_REQUEST, "path", &why),
    };
    let Some(asked) = split_identifier(parts).map(|asked| Asked { folder, ..asked }) else {
        let why = "a path here is a repository name (sid.inpe.br/mtc-m18/2009/02.16.17.46) or an IBIp (8JMKD3MGP8W/34PGRBS), optionally followed by a file of the item";
        return pages::not_found_response(uri.path(), why);
    };
    let resolver_app = app.clone();
    let identifier = asked.identifier.clone();
    let resolution = match short(&app, move || resolver_app.resolver.resolve(&identifier)).await {
        Ok(resolution) => resolution,
        Err(timed_out) => return elsewhere_or(&app, &asked, Lost::unknown(&asked), uri.query(), timed_out).await,
    };
    let headers = request.headers();
    match resolution {
        Err(e @ (ibi::Error::Parse(_) | ibi::Error::Invalid { .. })) => pages::not_found_response(
            &asked.identifier,
            &format!("it is not an identifier this server knows how to read: {e}"),
        ),
        Err(e) => {
            let failed = refuse(StatusCode::SERVICE_UNAVAILABLE, "collection", &e.to_string());
            elsewhere_or(&app, &asked, Lost::unknown(&asked), uri.query(), failed).await
        }
        Ok(Resolution::Unknown) => {
            let missing = pages::not_found_response(&asked.identifier, "no collection served here holds or held it");
            match recorded_present(&app, &asked).await {
                Some(lost) => elsewhere_or(&app, &asked, lost, uri.query(), missing).await,
                None => missing,
            }
        }
        Ok(Resolution::Redirect(name)) => redirect(&name, &asked, uri.query()),
        Ok(Resolution::Moved { name, to }) => match &to.url {
            Some(url) => forward(StatusCode::MOVED_PERMANENTLY, &format!("{url}{name}"), &asked, None),
            None => pages::moved_response(&name, &to, wants_json(headers)),
        },
        Ok(Resolution::Withdrawn { view, .. }) => pages::gone_response(&view, wants_json(headers)),
        Ok(Resolution::Item { store, view }) => {
            let lost =
                Lost { name: Some(view.name.clone()), store: Some(store), identity: Some(view.identity.clone()) };
            let response = serve_item(&app, store, view, &asked, uri.query(), headers).await;
            match response.status() {
                StatusCode::INTERNAL_SERVER_ERROR | StatusCode::SERVICE_UNAVAILABLE => {
                    elsewhere_or(&app, &asked, lost, uri.query(), response).await
                }
                _ => response,
            }
        }
    }
}

/// An item whose bytes this server cannot read: its name (when the request
/// spelled one or it resolved), the collection that should hold it and the
/// identity it should have, when known.
struct Lost {
    name: Option<ibi::id::RepositoryName>,
    store: Option<usize>,
    identity: Option<String>,
}

impl Lost {
    /// Nothing known but what the request spelled.
    fn unknown(asked: &Asked) -> Lost {
        Lost { name: ibi::id::RepositoryName::parse(&asked.identifier).ok(), store: None, identity: None }
    }
}

/// The collection whose inventory names `asked` present (and the identity it
/// records) although the resolver found no item: its copy here went missing.
/// Asked only when some collection served has sites to send the request to.
async fn recorded_present(app: &Arc<App>, asked: &Asked) -> Option<Lost> {
    let name = ibi::id::RepositoryName::parse(&asked.identifier).ok().filter(|_| app.elsewhere.any())?;
    let finder = app.clone();
    blocking(move || {
        finder.resolver.stores().iter().enumerate().find_map(|(index, store)| {
            let record = store.inventory().records(std::slice::from_ref(&name)).ok()?.pop().flatten()?;
            (record.status == ibi::store::inventory::Status::Present).then(|| Lost {
                identity: Some(record.current().digest.clone()),
                name: Some(name.clone()),
                store: Some(index),
            })
        })
    })
    .await
}

/// 307 to a site of the collection that holds a verified copy of the item
/// (`elsewhere`), with the file, `.zip` and query asked for; `failed` when no
/// site does, or the sites did not answer in time.
async fn elsewhere_or(app: &Arc<App>, asked: &Asked, lost: Lost, query: Option<&str>, failed: Response) -> Response {
    let Some(name) = lost.name.filter(|_| app.elsewhere.any()) else { return failed };
    let finder = app.clone();
    let target = name.clone();
    let find = blocking(move || finder.elsewhere.site_with(lost.store, &target, lost.identity.as_deref()));
    match tokio::time::timeout(super::RESPONSE_TIMEOUT, find).await {
        Ok(Some(base)) => forward(StatusCode::TEMPORARY_REDIRECT, &format!("{base}{name}"), asked, query),
        _ => failed,
    }
}

/// A redirect (`status`: 301 where a moved item now lives, 307 to a site with a
/// copy) to the item's name under `base`, with the file or `.zip` asked for,
/// and the query when given.
fn forward(status: StatusCode, base: &str, asked: &Asked, query: Option<&str>) -> Response {
    let mut location = format!("{base}{}", if asked.zip { ".zip" } else { "" });
    if !asked.rest.is_empty() {
        location.push('/');
        location.push_str(&pages::percent_path(&asked.rest.join("/")));
    }
    if let Some(query) = query {
        location.push('?');
        location.push_str(query);
    }
    let mut response = status.into_response();
    match HeaderValue::from_str(&location) {
        Ok(value) => response.headers_mut().insert(header::LOCATION, value),
        Err(_) => return refuse(StatusCode::BAD_REQUEST, "path", "it cannot be redirected"),
    };
    response
}

fn redirect(name: &ibi::id::RepositoryName, asked: &Asked, query: Option<&str>) -> Response {
    let mut location = format!("/{name}{}", if asked.zip { ".zip" } else { "" });
    if !asked.rest.is_empty() {
        location.push('/');
        location.push_str(&pages::percent_path(&asked.rest.join("/")));
    }
    if let Some(query) = query {
        location.push('?');
        location.push_str(query);
    }
    let mut response = StatusCode::MOVED_PERMANENTLY.into_response();
    match HeaderValue::from_str(&location) {
        Ok(value) => response.headers_mut().insert(header::LOCATION, value),
        Err(_) => return refuse(StatusCode::BAD_REQUEST, "path", "it cannot be redirected"),
    };
    response
}

async fn serve_item(
    app: &Arc<App>,
    store: usize,
    view: Arc<ItemView>,
    asked: &Asked,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Response {
    if asked.zip {
        return zipped::response(app.clone(), store, view, headers).await;
    }
    if asked.rest.is_empty() {
        let base = url_base(app, headers);
        let json = wants_json(headers);
        // A page for people is the item's folder, `/NAME/`, so that a mirror
        // (`wget --mirror`) makes NAME a folder and its files fit under it.
        if !json && !asked.folder && query.is_none() {
            return folder_redirect(&view.name);
        }
        let (metadata, files) = item_query(query);
        let page = match metadata {
            true => pages::metadata_response(&view, json, files),
            false => pages::landing_response(&view, &base, &app.mirrors_of(store), json, files),
        };
        return compressed(headers, page).await;
    }
    let path = asked.rest.join("/");
    match view.file(&path) {
        Some(file) => files::response(app.clone(), store, view.clone(), file.clone(), headers).await,
        None => pages::not_found_response(
            &format!("{}/{path}", view.name),
            "the item's manifests list no such file (only listed payload and tag files are served)",
        ),
    }
}

/// 301 from `/NAME` to `/NAME/`, the item's page as a folder.
fn folder_redirect(name: &ibi::id::RepositoryName) -> Response {
    let mut response = StatusCode::MOVED_PERMANENTLY.into_response();
    match HeaderValue::from_str(&format!("/{name}/")) {
        Ok(value) => response.headers_mut().insert(header::LOCATION, value),
        Err(_) => return refuse(StatusCode::BAD_REQUEST, "path", "it cannot be redirected"),
    };
    response
}

/// What the query of an item's page asks: the metadata (`??`, a query that starts
/// with `?`), and which page of its files (`files=N`, from 1; 1 when absent or not a number).
fn item_query(query: Option<&str>) -> (bool, usize) {
    let query = query.unwrap_or("");
    let (metadata, rest) = match query.strip_prefix('?') {
        Some(rest) => (true, rest),
        None => (false, query),
    };
    let files = rest.split('&').find_map(|pair| pair.strip_prefix("files=")?.parse().ok()).unwrap_or(1);
    (metadata, files)
}

#[derive(serde::Deserialize, Default)]
pub struct BrowseParams {
    prefix: Option<String>,
    date: Option<String>,
    q: Option<String>,
    page: Option<usize>,
}

/// What is served, for people: each collection's organisation (when it names
/// one) and subsystem, in the order given.
fn served(app: &App) -> String {
    let one = |store: &dyn ibi::store::Store| match store.organisation() {
        Some(organisation) => format!("{organisation} ({})", store.subsystem().prefix()),
        None => store.subsystem().prefix().to_string(),
    };
    app.resolver.stores().iter().map(|store| one(store.as_ref())).collect::<Vec<_>>().join(", ")
}

async fn browse(
    State(app): State<Arc<App>>,
    params: Result<Query<BrowseParams>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
) -> Response {
    let params = match params {
        Ok(Query(params)) => params,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, "query", &e.body_text()),
    };
    let query = BrowseQuery {
        prefix: params.prefix.filter(|p| !p.is_empty()),
        date: params.date.filter(|d| !d.is_empty()),
        text: params.q.filter(|q| !q.is_empty()),
        page: params.page.unwrap_or(1).max(1) - 1,
        per_page: PER_PAGE,
    };
    let for_page = query.clone();
    let browser = app.clone();
    match blocking(move || browser.resolver.browse(&for_page)).await {
        Ok(page) => pages::browse_response(&page, &query, wants_json(&headers), &served(&app)),
        Err(e @ ibi::Error::Invalid { .. }) => refuse(StatusCode::BAD_REQUEST, "page", &e.to_string()),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, "browse", &e.to_string()),
    }
}

/// The latest witness of each collection served (one object for one collection,
/// an array for several); 404 when none has one yet.
async fn witness_latest(State(app): State<Arc<App>>) -> Response {
    let found = blocking(move || -> ibi::Result<Vec<ibi::ops::witness::Witness>> {
        let mut all = Vec::new();
        for store in app.resolver.stores() {
            all.extend(ibi::ops::witness::latest(store.as_ref())?);
        }
        Ok(all)
    })
    .await;
    match found {
        Ok(all) if all.is_empty() => refuse(StatusCode::NOT_FOUND, "witness", "no collection here has a witness yet"),
        Ok(mut all) if all.len() == 1 => axum::Json(all.remove(0)).into_response(),
        Ok(all) => axum::Json(all).into_response(),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, "witness", &e.to_string()),
    }
}

/// Proofs are made one at a time: each reads every item's tagmanifest.
static PROVING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The inclusion proof of one item in its collection's latest witness.
async fn witness_proof(
    State(app): State<Arc<App>>,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> Response {
    let proved = blocking(move || -> ibi::Result<ibi::ops::witness::Proof> {
        let name = ibi::id::RepositoryName::parse(&name)?;
        let _one_at_a_time = PROVING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let holder = app.resolver.stores().iter().find(|s| matches!(s.slot(&name), Ok(ibi::store::Slot::Item)));
        let store = holder.ok_or_else(|| ibi::Error::NotFound {
            what: "item",
            name: name.to_string(),
            place: "this server".into(),
        })?;
        let latest = ibi::ops::witness::latest(store.as_ref())?.ok_or_else(|| ibi::Error::NotFound {
            what: "witness",
            name: name.to_string(),
            place: store.location().into(),
        })?;
        ibi::ops::witness::prove(store.as_ref(), &latest, &name.to_string())
    })
    .await;
    match proved {
        Ok(proof) => axum::Json(proof).into_response(),
        Err(e @ (ibi::Error::NotFound { .. } | ibi::Error::Parse(_))) => {
            refuse(StatusCode::NOT_FOUND, "witness", &e.to_string())
        }
        Err(e) => refuse(StatusCode::CONFLICT, "witness", &e.to_string()),
    }
}

/// `/.well-known/ibi/ocfl/ID`: the item an OCFL object became (its id as
/// its OCFL root names it, percent-encoded as a path), by a 303 to the
/// item's page; 404 when no collection here took it.
async fn ocfl_object(State(app): State<Arc<App>>, axum::extract::Path(id): axum::extract::Path<String>) -> Response {
    let resolver_app = app.clone();
    let looked = id.clone();
    match blocking(move || resolver_app.resolver.resolve_ocfl_id(&looked)).await {
        Ok(Some(name)) => forward(StatusCode::SEE_OTHER, &format!("/{name}"), &Asked::nothing_more(), None),
        Ok(None) => refuse(StatusCode::NOT_FOUND, "ocfl", &format!("no collection here took the OCFL object {id}")),
        Err(e) => refuse(StatusCode::SERVICE_UNAVAILABLE, "collection", &e.to_string()),
    }
}

/// The HANDLE.NET proxy's REST API (`/api/handles/<handle>`, HANDLE.NET 9
/// Technical Manual, "JSON-Based REST API"): `?index=` and `?type=` (each may
/// repeat) pick values, a value matching either is kept; the handle is echoed as
/// asked; response codes and HTTP statuses are the proxy's (1 with 200, 100
/// "handle not found" with 404, 102 "invalid handle" with 400, 200 "values not
/// found" with 200, 2 "error" with 500), and every answer allows any origin.
async fn api_handles(State(app): State<Arc<App>>, request: Request) -> Response {
    let raw = request.uri().path().strip_prefix("/api/handles").unwrap_or("").trim_start_matches('/');
    let asked = match segments(raw) {
        Ok(parts) => parts.join("/"),
        Err(why) => return handle_answer(StatusCode::BAD_REQUEST, 102, raw, Some(&why), None),
    };
    let (indexes, types) = value_filters(request.uri().query().unwrap_or(""));
    let base = url_base(&app, request.headers());
    let resolver = app.clone();
    let text = asked.clone();
    let found = blocking(move || {
        let first = resolver.resolver.resolve(&text)?;
        let target = match &first {
            Resolution::Redirect(name) => resolver.resolver.resolve(&name.to_string())?,
            other => other.clone(),
        };
        Ok::<_, ibi::Error>((first, target))
    })
    .await;
    let (first, target) = match found {
        Ok(pair) => pair,
        Err(ibi::Error::Parse(e)) => {
            return handle_answer(StatusCode::BAD_REQUEST, 102, &asked, Some(&e.to_string()), None)
        }
        Err(e) => return handle_answer(StatusCode::INTERNAL_SERVER_ERROR, 2, &asked, Some(&e.to_string()), None),
    };
    let (store, view) = match target {
        Resolution::Item { store, view } | Resolution::Withdrawn { store, view } => (store, view),
        _ => return handle_answer(StatusCode::NOT_FOUND, 100, &asked, None, None),
    };
    let is_ibip = matches!(first, Resolution::Redirect(_)) && !asked.contains('.');
    let values = match is_ibip {
        true => resolution::alias_values(&view),
        false => resolution::handle_values(&view, &base, &app.mirrors_of(store)),
    };
    let picked: Vec<_> = values
        .into_iter()
        .filter(|v| {
            (indexes.is_empty() && types.is_empty())
                || indexes.contains(&v.index)
                || types.iter().any(|t| t.eq_ignore_ascii_case(&v.kind))
        })
        .collect();
    let code = if picked.is_empty() { 200 } else { 1 };
    let values = serde_json::to_value(picked).unwrap_or_default();
    handle_answer(StatusCode::OK, code, &asked, None, Some(values))
}

/// The `index` and `type` parameters of a handle query, each as often as given.
fn value_filters(query: &str) -> (Vec<u32>, Vec<String>) {
    let (mut indexes, mut types) = (Vec::new(), Vec::new());
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decode_str(&value.replace('+', " ")).decode_utf8_lossy().into_owned();
        match key {
            "index" => indexes.extend(value.parse::<u32>().ok()),
            "type" => types.push(value),
            _ => {}
        }
    }
    (indexes, types)
}

/// One answer of the handle API, as the proxy shapes it: `values` (an array) when
/// the handle was found, `message` for an error, CORS open to any origin.
fn handle_answer(
    status: StatusCode,
    code: u32,
    handle: &str,
    message: Option<&str>,
    values: Option<serde_json::Value>,
) -> Response {
    let mut body = serde_json::json!({"responseCode": code, "handle": handle});
    if let Some(message) = message {
        body["message"] = message.into();
    }
    if let Some(values) = values {
        body["values"] = values;
    }
    let mut response = (status, axum::Json(body)).into_response();
    response.headers_mut().insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    response
}
