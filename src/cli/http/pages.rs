//! The pages people read: an item's landing page and metadata (`??`), the browse
//! page, and the 404 and 410 pages; each also as JSON when the client asks for it
//! (`Accept: application/json`). Every text from a collection is escaped.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use ibi::id::RepositoryName;
use ibi::ops::resolution::{BrowsePage, BrowseQuery, FileView, ItemView};
use ibi::store::inventory::Forward;
use serde_json::json;

pub const HTML: &str = "text/html; charset=utf-8";

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem;color:#222}\
table{border-collapse:collapse;margin:.5rem 0 1.5rem}td,th{border-bottom:1px solid #ddd;padding:.25rem .6rem;text-align:left;vertical-align:top}\
table{display:block;overflow-x:auto;max-width:100%}code,.mono{font-family:ui-monospace,monospace;font-size:.9em;white-space:nowrap}\
h1{font-size:1.5rem;overflow-wrap:break-word}td.size{text-align:right;white-space:nowrap}\
.gone{color:#8a1c1c}nav a{margin-right:1rem}form input{margin-right:.5rem}";

/// Escapes text for HTML content and attribute values.
pub fn esc(text: &str) -> String {
    ibi::markup::escape(text)
}

fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
<title>{}</title><style>{STYLE}</style></head><body><nav><a href=\"/\">Browse the collection</a></nav>{body}</body></html>",
        esc(title)
    )
}

/// Pages switch between HTML and JSON on `Accept`, so every one says so to caches.
fn html(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, HTML), (header::VARY, "Accept")], body).into_response()
}

fn json_response(status: StatusCode, value: serde_json::Value) -> Response {
    (status, [(header::VARY, "Accept")], axum::Json(value)).into_response()
}

/// A page saying what is wrong with a request, and where.
pub fn problem(status: StatusCode, what: &str, why: &str) -> String {
    let reason = status.canonical_reason().unwrap_or("");
    let body = format!("<h1>{} {}</h1><p><b>{}</b>: {}</p>", status.as_u16(), esc(reason), esc(what), esc(why));
    page(reason, &body)
}

/// 404, saying what was asked, why it is not here, and what would be.
pub fn not_found_response(asked: &str, why: &str) -> Response {
    let body = format!(
        "<h1>Not found</h1><p><code>{}</code>: {}.</p><p>Items here are reached by their repository name \
(<code>/sid.inpe.br/mtc-m18/2009/02.16.17.46</code>) or their IBIp (<code>/8JMKD3MGP8W/34PGRBS</code>); \
<a href=\"/\">browse</a> or search the collection.</p>",
        esc(asked),
        esc(why)
    );
    html(StatusCode::NOT_FOUND, page("Not found", &body))
}

/// 410 for an item that moved to another collection with no public URL recorded:
/// where it went and when.
pub fn moved_response(name: &RepositoryName, to: &Forward, json: bool) -> Response {
    if json {
        let body = json!({"name": name.to_string(), "status": "moved", "moved": {"to": to.to, "date": to.date}});
        return json_response(StatusCode::GONE, body);
    }
    let body = format!(
        "<h1>Moved</h1><p><code>{}</code> is no longer here: it moved to <code>{}</code> on {}.</p>",
        esc(&name.to_string()),
        esc(&to.to),
        esc(&human_date(&to.date))
    );
    html(StatusCode::GONE, page("Moved", &body))
}

/// 410 for a withdrawn item: its identifiers and its tombstone.
pub fn gone_response(view: &ItemView, json: bool) -> Response {
    let (date, reason) = view.withdrawn.as_ref().map_or(("", ""), |w| (w.date.as_str(), w.reason.as_str()));
    if json {
        let body = json!({"name": view.name, "ibip": view.ibip, "status": "withdrawn", "withdrawn": {"date": date, "reason": reason}});
        return json_response(StatusCode::GONE, body);
    }
    let body = format!(
        "<h1 class=\"gone\">Withdrawn</h1>{}<p class=\"gone\">Withdrawn on {} : {}</p>\
<p>The name is never given to another item.</p>",
        identifiers(view),
        esc(&human_date(date)),
        esc(reason)
    );
    html(StatusCode::GONE, page(&format!("Withdrawn: {}", view.name), &body))
}

fn identifiers(view: &ItemView) -> String {
    let ibip = view.ibip.as_ref().map(|i| i.to_string()).unwrap_or_else(|| "—".into());
    format!(
        "<table class=\"ids\"><tr><th>Repository name</th><td class=\"mono\">{}</td></tr>\
<tr><th>IBIp</th><td class=\"mono\">{}</td></tr><tr><th>Identity (sha256 of the tagmanifest)</th><td class=\"mono\">{}</td></tr></table>",
        esc(&view.name.to_string()),
        esc(&ibip),
        esc(&view.identity)
    )
}

fn info_table(view: &ItemView) -> String {
    let rows: String =
        view.info.iter().map(|(l, v)| format!("<tr><th>{}</th><td>{}</td></tr>", esc(l), esc(v))).collect();
    format!("<h2>bag-info</h2><table>{rows}</table>")
}

/// A date as people read it: `2026-11-24 07:18:03 UTC`, from RFC 3339 in UTC
/// (`2026-11-24T07:18:03.123456789Z`); anything else is shown as it is.
pub fn human_date(rfc3339: &str) -> String {
    match (rfc3339.get(..10), rfc3339.get(10..11), rfc3339.get(11..19)) {
        (Some(day), Some("T"), Some(time)) if rfc3339.ends_with('Z') => format!("{day} {time} UTC"),
        _ => rfc3339.to_string(),
    }
}

/// A size as people read it (`1.21 MiB`), the exact bytes in its tooltip.
fn size_cell(size: Option<u64>) -> String {
    match size {
        Some(bytes) => format!("<td class=\"size\" title=\"{bytes} bytes\">{}</td>", indicatif::HumanBytes(bytes)),
        None => "<td class=\"size\">?</td>".into(),
    }
}

fn history_table(view: &ItemView) -> String {
    let rows: String = view
        .versions
        .iter()
        .map(|v| {
            let (date, digest) = (esc(&human_date(&v.date)), esc(&v.digest));
            format!(
                "<tr><td>{}</td><td title=\"{}\">{date}</td><td class=\"mono\">{digest}</td></tr>",
                v.number,
                esc(&v.date)
            )
        })
        .collect();
    format!("<h2>Versions</h2><table><tr><th>Version</th><th>Date</th><th>Identity</th></tr>{rows}</table>")
}

/// How many files a page lists: an item of 200,000 files is read a page at a time.
pub const FILES_PER_PAGE: usize = 1000;

/// The files of one page (`files=N`, from 1) and how many pages there are.
fn files_page(view: &ItemView, page: usize) -> (&[FileView], usize) {
    let pages = view.files.len().div_ceil(FILES_PER_PAGE).max(1);
    let first = (page.clamp(1, pages) - 1) * FILES_PER_PAGE;
    (&view.files[first..(first + FILES_PER_PAGE).min(view.files.len())], pages)
}

/// Links to the other pages of the files, kept on `path` (the landing page or `??`).
fn files_pager(view: &ItemView, path: &str, page: usize, pages: usize) -> String {
    if pages <= 1 {
        return String::new();
    }
    let page = page.clamp(1, pages);
    let link = |to: usize, label: &str| format!("<a href=\"{}files={to}\">{label}</a>", esc(path));
    let mut links = format!("<p>Files page {page} of {pages} ({} files). ", view.files.len());
    if page > 1 {
        links.push_str(&link(page - 1, "← Previous"));
        links.push(' ');
    }
    if page < pages {
        links.push_str(&link(page + 1, "Next →"));
    }
    links.push_str("</p>");
    links
}

fn files_table(view: &ItemView, path: &str, page: usize) -> String {
    let (files, pages) = files_page(view, page);
    let pager = files_pager(view, path, page, pages);
    let rows: String = files
        .iter()
        .map(|f| {
            format!(
                "<tr><td>{}</td>{}<td class=\"mono\">{}</td></tr>",
                file_link(view, f),
                size_cell(f.size),
                esc(&f.sha256)
            )
        })
        .collect();
    format!("<h2>Files</h2>{pager}<table><tr><th>Path</th><th>Size</th><th>sha256</th></tr>{rows}</table>{pager}")
}

/// A link to one file; a name holding a control character (a newline, a TAB)
/// is shown escaped without a link, since the server refuses such paths: it is
/// in the item's zip.
fn file_link(view: &ItemView, file: &FileView) -> String {
    if file.path.chars().any(char::is_control) {
        let shown: String = file.path.escape_debug().collect();
        return format!("{} <small>(its name holds a control character: download the zip)</small>", esc(&shown));
    }
    let href = format!("/{}/{}", view.name, percent_path(&file.path));
    format!("<a href=\"{}\">{}</a>", esc(&href), esc(&file.path))
}

/// A path inside an item, each segment percent-encoded for a URL.
pub fn percent_path(path: &str) -> String {
    use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
    const SEGMENT: &AsciiSet =
        &CONTROLS.add(b' ').add(b'"').add(b'#').add(b'%').add(b'<').add(b'>').add(b'?').add(b'`').add(b'{').add(b'}');
    path.split('/').map(|p| utf8_percent_encode(p, SEGMENT).to_string()).collect::<Vec<_>>().join("/")
}

/// The item's landing page.
pub fn landing_response(view: &ItemView, url_base: &str, mirrors: &[String], json: bool, file_page: usize) -> Response {
    let name = view.name.to_string();
    let places: Vec<String> =
        std::iter::once(url_base).chain(mirrors.iter().map(String::as_str)).map(|b| format!("{b}{name}")).collect();
    if json {
        let (files, pages) = files_page(view, file_page);
        let mut value = json!({"name": view.name, "ibip": view.ibip, "title": view.title, "status": view.status,
            "withdrawn": view.withdrawn, "identity": view.identity, "versions": view.versions, "info": view.info,
            "files": files, "file_count": view.files.len(), "files_page": file_page.clamp(1, pages), "files_pages": pages});
        value["url"] = json!(format!("{url_base}{name}"));
        value["locations"] = json!(places);
        return json_response(StatusCode::OK, value);
    }
    let title = view.title.clone().unwrap_or_else(|| name.clone());
    // Linked as folders (`…/NAME/`), as the item's page is, so that a mirroring
    // tool never saves NAME as a file where its folder belongs.
    let links: String =
        places.iter().map(|p| format!("<li><a href=\"{0}/\">{0}</a></li>", esc(p.trim_end_matches('/')))).collect();
    let body = format!(
        "<h1>{}</h1>{}<p><a href=\"/{name}??\">Metadata</a> · <a href=\"/{name}.zip\">Download as a bag (zip)</a> · \
<a href=\"/api/handles/{name}\">Handle values</a></p>{}<h2>Where it is served</h2><ul>{links}</ul>{}{}",
        esc(&title),
        identifiers(view),
        files_table(view, "?", file_page),
        info_table(view),
        history_table(view)
    );
    html(StatusCode::OK, page(&title, &body))
}

/// The item's metadata (`??`): bag-info, manifests, history.
pub fn metadata_response(view: &ItemView, json: bool, file_page: usize) -> Response {
    if json {
        let (files, pages) = files_page(view, file_page);
        let manifest: Vec<_> = files.iter().filter(|f| f.payload).collect();
        let tags: Vec<_> = files.iter().filter(|f| !f.payload).collect();
        let info: Vec<_> = view.info.iter().map(|(l, v)| json!({"label": l, "value": v})).collect();
        let body = json!({"name": view.name, "ibip": view.ibip, "identity": view.identity, "bag_info": info,
            "manifest": manifest, "tag_files": tags, "versions": view.versions, "withdrawn": view.withdrawn,
            "file_count": view.files.len(), "files_page": file_page.clamp(1, pages), "files_pages": pages});
        return json_response(StatusCode::OK, body);
    }
    let name = view.name.to_string();
    let body = format!(
        "<h1>Metadata of {}</h1>{}{}{}{}",
        esc(&name),
        identifiers(view),
        files_table(view, "??", file_page),
        info_table(view),
        history_table(view)
    );
    html(StatusCode::OK, page(&format!("Metadata: {name}"), &body))
}

/// The browse page: a search form, a page of items, and links to the next and
/// previous pages, titled with what is served (`served`: each collection's
/// organisation and subsystem).
pub fn browse_response(found: &BrowsePage, query: &BrowseQuery, json: bool, served: &str) -> Response {
    if json {
        return json_response(StatusCode::OK, serde_json::to_value(found).unwrap_or_default());
    }
    let value = |v: &Option<String>| esc(v.as_deref().unwrap_or(""));
    let form = format!(
        "<form method=\"get\" action=\"/\"><input name=\"prefix\" placeholder=\"name prefix\" value=\"{}\">\
<input name=\"date\" placeholder=\"date (2009-02)\" value=\"{}\"><input name=\"q\" placeholder=\"words in bag-info\" value=\"{}\">\
<button>Search</button></form>",
        value(&query.prefix),
        value(&query.date),
        value(&query.text)
    );
    let rows: String = found
        .items
        .iter()
        .map(|item| {
            let name = item.name.to_string();
            let ibip = item.ibip.as_ref().map(|i| i.to_string()).unwrap_or_default();
            let title = item.title.as_deref().unwrap_or("");
            format!(
                "<tr><td><a href=\"/{0}/\" class=\"mono\">{0}</a></td><td class=\"mono\">{1}</td><td>{2}</td><td>{3}</td></tr>",
                esc(&name),
                esc(&ibip),
                esc(&human_date(&item.date)),
                esc(title)
            )
        })
        .collect();
    let title = format!("Items of {served}");
    let body = format!(
        "<h1>{}</h1>{form}<p>{} item(s) match; newest first; page {}.</p>\
<table><tr><th>Repository name</th><th>IBIp</th><th>Date</th><th>Title</th></tr>{rows}</table>{}",
        esc(&title),
        found.total,
        found.page + 1,
        pager(found, query)
    );
    html(StatusCode::OK, page(&title, &body))
}

fn pager(found: &BrowsePage, query: &BrowseQuery) -> String {
    let link = |page: usize, label: &str| {
        let mut params = url_params(query);
        params.push(("page", (page + 1).to_string()));
        let text: Vec<String> = params
            .iter()
            .map(|(k, v)| {
                format!("{k}={}", percent_encoding::utf8_percent_encode(v, percent_encoding::NON_ALPHANUMERIC))
            })
            .collect();
        format!("<a href=\"/?{}\">{label}</a>", esc(&text.join("&")))
    };
    let mut links = String::new();
    if found.page > 0 {
        links.push_str(&link(found.page - 1, "← Newer"));
    }
    let per_page = query.per_page.max(1);
    let next_served = (found.page + 2).saturating_mul(per_page) <= ibi::ops::resolution::BROWSE_DEPTH;
    if (found.page + 1) * per_page < found.total && next_served {
        links.push_str(&link(found.page + 1, "Older →"));
    }
    format!("<nav>{links}</nav>")
}

fn url_params(query: &BrowseQuery) -> Vec<(&'static str, String)> {
    [("prefix", &query.prefix), ("date", &query.date), ("q", &query.text)]
        .into_iter()
        .filter_map(|(k, v)| v.clone().map(|v| (k, v)))
        .collect()
}
