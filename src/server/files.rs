//! Workspace files over MCP: new images a call produced come back as image content, and
//! every workspace file is a resource (`warden://sessions/{session}/files/{path}`, the
//! path's raw bytes percent-encoded, so names that are not UTF-8 work too).
//!
//! Everything here was shaped by sandboxed code, so it carries provenance: a listing's
//! names are escaped ([`shown_path`]) and each entry has `_meta.provenance`; a text file's
//! contents come back inside provenance delimiters with `&`, `<`, `>` escaped; a binary
//! file's contents stay byte-exact (base64) with `_meta.provenance`. Files are read with
//! [`read_beneath`], so what the code put in its workspace (symlinks included) can never
//! make the server read anything outside it. Listings are paginated (500 a page).

use base64::Engine;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, percent_encode};
use rmcp::model::{ContentBlock, Resource, ResourceContents};

use crate::execution::ExecResult;
use crate::owner::Owner;
use crate::provenance;
use crate::session::SessionManager;
use crate::workspace::{Change, EntryKind, MAX_READ_BYTES, mime_for, read_beneath, shown_path};

/// Largest image attached to a result, and how many at most.
const MAX_IMAGE_BYTES: u64 = 2 << 20;
const MAX_IMAGES: usize = 4;
/// Workspace files listed per page of `resources/list`.
pub const PAGE: usize = 500;

/// Bytes kept as they are in a path segment of a resource URI.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// The resource URI of a workspace file (raw path bytes, percent-encoded per segment).
pub fn file_uri(session: &str, path: &[u8]) -> String {
    let encoded: Vec<String> = path
        .split(|b| *b == b'/')
        .map(|seg| percent_encode(seg, SEGMENT).to_string())
        .collect();
    format!("warden://sessions/{session}/files/{}", encoded.join("/"))
}

/// Splits a file URI into (session, raw relative path). Pure.
pub fn parse_file_uri(uri: &str) -> Option<(String, Vec<u8>)> {
    let rest = uri.strip_prefix("warden://sessions/")?;
    let (session, path) = rest.split_once("/files/")?;
    let path: Vec<u8> = percent_decode_str(path).collect();
    if session.is_empty() || path.is_empty() {
        return None;
    }
    Some((session.to_string(), path))
}

/// Image content blocks for the images a call created or changed.
pub fn images_for(
    manager: &SessionManager,
    owner: &Owner,
    result: &ExecResult,
) -> Vec<ContentBlock> {
    let Some(workspace) = manager.workspace_of(owner, &result.session) else {
        return Vec::new();
    };
    let engine = base64::engine::general_purpose::STANDARD;
    result
        .files
        .iter()
        .filter(|f| f.change != Change::Deleted && f.kind == EntryKind::File)
        .filter(|f| f.size <= MAX_IMAGE_BYTES)
        .filter(|f| {
            matches!(
                mime_for(&f.raw),
                "image/png" | "image/jpeg" | "image/gif" | "image/webp"
            )
        })
        .take(MAX_IMAGES)
        .filter_map(|f| {
            let bytes = read_beneath(&workspace, &f.raw, MAX_IMAGE_BYTES).ok()?;
            Some(ContentBlock::image(engine.encode(bytes), mime_for(&f.raw)))
        })
        .collect()
}

/// The cursor that continues a listing after (session, path).
fn cursor_of(session: &str, path: &[u8]) -> String {
    let mut raw = session.as_bytes().to_vec();
    raw.push(0);
    raw.extend_from_slice(path);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

fn parse_cursor(cursor: &str) -> Option<(String, Vec<u8>)> {
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()?;
    let split = raw.iter().position(|b| *b == 0)?;
    let session = String::from_utf8(raw[..split].to_vec()).ok()?;
    Some((session, raw[split + 1..].to_vec()))
}

/// One page of a listing.
pub struct Listing {
    pub resources: Vec<Resource>,
    /// The cursor of the next page.
    pub next: Option<String>,
    /// (session, why) for sessions whose listing is not their whole workspace.
    pub incomplete: Vec<(String, String)>,
}

/// One page of `owner`'s workspace files as resources.
///
/// # Errors
/// A cursor this server did not hand out.
pub fn list(
    manager: &SessionManager,
    owner: &Owner,
    cursor: Option<&str>,
) -> Result<Listing, String> {
    let after = match cursor {
        Some(c) => {
            Some(parse_cursor(c).ok_or_else(|| format!("{c:?} is not a cursor from this server"))?)
        }
        None => None,
    };
    let page = manager.workspace_files(
        owner,
        after.as_ref().map(|(s, p)| (s.as_str(), p.as_slice())),
        PAGE,
    );
    let next = page
        .more
        .then(|| page.files.last().map(|(s, p, _)| cursor_of(s, p)))
        .flatten();
    let resources = page
        .files
        .iter()
        .map(|(session, path, size)| {
            let (name, _) = shown_path(path);
            let uri = file_uri(session, path);
            Resource::new(uri.clone(), name)
                .with_description(format!(
                    "{size} bytes in session {session}'s workspace, written by sandboxed code (untrusted)"
                ))
                .with_mime_type(mime_for(path))
                .with_size(*size)
                .with_meta(provenance::untrusted_meta("workspace_file", &uri, None))
        })
        .collect();
    Ok(Listing {
        resources,
        next,
        incomplete: page.incomplete,
    })
}

/// Reads one workspace file resource of one of `owner`'s sessions.
pub fn read(
    manager: &SessionManager,
    owner: &Owner,
    uri: &str,
) -> Result<ResourceContents, String> {
    let (session, path) =
        parse_file_uri(uri).ok_or_else(|| format!("{uri} is not a workspace file URI"))?;
    let workspace = manager
        .workspace_of(owner, &session)
        .ok_or_else(|| format!("no session {session:?}"))?;
    let bytes = read_beneath(&workspace, &path, MAX_READ_BYTES).map_err(|e| {
        format!(
            "cannot read {} in session {session:?}: {e}",
            shown_path(&path).0
        )
    })?;
    let mime = mime_for(&path);
    let textual =
        mime.starts_with("text/") || mime == "application/json" || mime == "image/svg+xml";
    Ok(match String::from_utf8(bytes) {
        Ok(text) if textual => {
            ResourceContents::text(provenance::wrap_file_text(uri, &text), uri)
                .with_mime_type(mime)
                .with_meta(provenance::untrusted_meta(
                    "workspace_file",
                    uri,
                    Some("provenance-wrapped: the file's text is between the delimiters, with &, < and > as &amp;, &lt; and &gt;"),
                ))
        }
        Ok(text) => blob(uri, mime, text.into_bytes()),
        Err(e) => blob(uri, mime, e.into_bytes()),
    })
}

/// Binary contents stay byte-exact; the provenance is in `_meta`.
fn blob(uri: &str, mime: &str, bytes: Vec<u8>) -> ResourceContents {
    ResourceContents::blob(base64::engine::general_purpose::STANDARD.encode(bytes), uri)
        .with_mime_type(mime)
        .with_meta(provenance::untrusted_meta(
            "workspace_file",
            uri,
            Some("base64 of the file's exact bytes"),
        ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_round_trip_odd_names() {
        for path in [
            &b"out.csv"[..],
            b"plots/fig 1.png",
            "data/é #?.txt".as_bytes(),
            b"bad\xff/name\n.txt",
        ] {
            let uri = file_uri("s1", path);
            assert!(
                !uri.contains(' ') && !uri.contains('#') && !uri.contains('?') && uri.is_ascii(),
                "{uri}"
            );
            assert_eq!(parse_file_uri(&uri), Some(("s1".into(), path.to_vec())));
        }
        assert_eq!(parse_file_uri("warden://settings"), None);
        assert_eq!(parse_file_uri("warden://sessions/s/files/"), None);
    }

    #[test]
    fn cursors_round_trip() {
        let c = cursor_of("s-1", b"a/\xff");
        assert_eq!(parse_cursor(&c), Some(("s-1".into(), b"a/\xff".to_vec())));
        assert_eq!(parse_cursor("not base64!"), None);
    }
}
