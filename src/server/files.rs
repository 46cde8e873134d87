//! Workspace files over MCP: new images a call produced come back as image content, and
//! every workspace file is a resource (`warden://sessions/{session}/files/{path}`). The
//! server reads them with [`read_beneath`], so what the sandboxed code put in its
//! workspace (symlinks included) can never make the server read anything outside it.

use base64::Engine;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use rmcp::model::{ContentBlock, Resource, ResourceContents};

use crate::execution::ExecResult;
use crate::owner::Owner;
use crate::session::SessionManager;
use crate::workspace::{Change, EntryKind, MAX_READ_BYTES, Snapshot, mime_for, read_beneath};

/// Largest image attached to a result, and how many at most.
const MAX_IMAGE_BYTES: u64 = 2 << 20;
const MAX_IMAGES: usize = 4;
/// Most workspace files listed as resources.
const MAX_LISTED: usize = 500;

/// Characters kept as they are in a path segment of a resource URI.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

pub fn file_uri(session: &str, path: &str) -> String {
    let encoded: Vec<String> = path
        .split('/')
        .map(|seg| utf8_percent_encode(seg, SEGMENT).to_string())
        .collect();
    format!("warden://sessions/{session}/files/{}", encoded.join("/"))
}

/// Splits a file URI into (session, relative path). Pure.
pub fn parse_file_uri(uri: &str) -> Option<(String, String)> {
    let rest = uri.strip_prefix("warden://sessions/")?;
    let (session, path) = rest.split_once("/files/")?;
    let path = percent_decode_str(path).decode_utf8().ok()?.into_owned();
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
                mime_for(&f.path),
                "image/png" | "image/jpeg" | "image/gif" | "image/webp"
            )
        })
        .take(MAX_IMAGES)
        .filter_map(|f| {
            let bytes = read_beneath(&workspace, &f.path, MAX_IMAGE_BYTES).ok()?;
            Some(ContentBlock::image(engine.encode(bytes), mime_for(&f.path)))
        })
        .collect()
}

/// Every file of every session of `owner`, as resources.
pub fn list(manager: &SessionManager, owner: &Owner) -> Vec<Resource> {
    let mut out = Vec::new();
    for (session, workspace) in manager.workspaces(owner) {
        for (path, size) in Snapshot::take(&workspace).files() {
            if out.len() >= MAX_LISTED {
                return out;
            }
            let mut r = Resource::new(file_uri(&session, &path), path.clone())
                .with_description(format!("{size} bytes in session {session}'s workspace"))
                .with_mime_type(mime_for(&path));
            r.size = Some(size);
            out.push(r);
        }
    }
    out
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
    let bytes = read_beneath(&workspace, &path, MAX_READ_BYTES)
        .map_err(|e| format!("cannot read {path} in session {session:?}: {e}"))?;
    let mime = mime_for(&path);
    let textual =
        mime.starts_with("text/") || mime == "application/json" || mime == "image/svg+xml";
    Ok(match String::from_utf8(bytes) {
        Ok(text) if textual => ResourceContents::text(text, uri).with_mime_type(mime),
        Ok(text) => ResourceContents::blob(
            base64::engine::general_purpose::STANDARD.encode(text.as_bytes()),
            uri,
        )
        .with_mime_type(mime),
        Err(e) => ResourceContents::blob(
            base64::engine::general_purpose::STANDARD.encode(e.into_bytes()),
            uri,
        )
        .with_mime_type(mime),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_round_trip_odd_names() {
        for path in ["out.csv", "plots/fig 1.png", "data/é #?.txt"] {
            let uri = file_uri("s1", path);
            assert!(
                !uri.contains(' ') && !uri.contains('#') && !uri.contains('?'),
                "{uri}"
            );
            assert_eq!(parse_file_uri(&uri), Some(("s1".into(), path.into())));
        }
        assert_eq!(parse_file_uri("warden://settings"), None);
        assert_eq!(parse_file_uri("warden://sessions/s/files/"), None);
    }
}
