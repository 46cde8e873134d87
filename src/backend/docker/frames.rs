//! How the worker's streams share a container's one stdin and one stdout. Each chunk is
//! a frame: one byte naming the stream, four bytes of length (little endian), the bytes.
//!
//! - Out of the container (the launcher's stdout): the worker's response pipe, fd 1 and
//!   fd 2, read by the launcher from pipes the code cannot reach. An empty frame is that
//!   stream's end of file. The server decodes them back into three streams for the
//!   protocol [`Channel`].
//! - Into the container (its stdin): the request stream (the policy, then request
//!   lines: exactly what a host worker's fd 3 receives), and the launcher's two orders,
//!   freeze and thaw. Orders and requests share one ordered stream, so a thaw always
//!   reaches the worker before the request it was sent for.
//!
//! [`Channel`]: crate::worker::protocol::Channel

/// Which stream a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Worker → server: protocol responses (fd 4).
    Responses = 1,
    /// Worker → server: the code's fd 1.
    Stdout = 2,
    /// Worker → server: the code's fd 2.
    Stderr = 3,
    /// Server → worker: the request stream (fd 3).
    Requests = 4,
    /// Server → launcher: stop every thread of the worker (an empty frame).
    Freeze = 5,
    /// Server → launcher: let the worker run again (an empty frame).
    Thaw = 6,
    /// Launcher → server, just before each response: the fingerprint of `/workspace`
    /// (eight bytes, little endian), or nothing when it was not taken. Only for an
    /// in-container workspace, whose copy it spares when nothing changed.
    Workspace = 7,
}

impl Stream {
    fn from_byte(b: u8) -> Option<Stream> {
        match b {
            1 => Some(Stream::Responses),
            2 => Some(Stream::Stdout),
            3 => Some(Stream::Stderr),
            4 => Some(Stream::Requests),
            5 => Some(Stream::Freeze),
            6 => Some(Stream::Thaw),
            7 => Some(Stream::Workspace),
            _ => None,
        }
    }

    /// Whether the launcher sends this stream (the server sends the others).
    pub fn from_launcher(self) -> bool {
        matches!(
            self,
            Stream::Responses | Stream::Stdout | Stream::Stderr | Stream::Workspace
        )
    }
}

/// Largest payload of one frame.
pub const MAX_FRAME: usize = 64 << 10;
const HEADER: usize = 5;

/// One frame's bytes: header and payload.
pub fn encode(stream: Stream, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.push(stream as u8);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// A decoded frame; an empty payload is the stream's end.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    pub stream: Stream,
    pub payload: Vec<u8>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("unknown stream {0} in a frame")]
    UnknownStream(u8),
    #[error("a frame of {0} bytes is larger than {MAX_FRAME}")]
    TooLarge(usize),
}

/// Turns a framed stream, in whatever chunks it arrives, back into frames.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
}

impl Decoder {
    /// Adds bytes; returns every frame now complete, in order.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<Frame>, FrameError> {
        self.buf.extend_from_slice(bytes);
        let mut frames = Vec::new();
        let mut at = 0;
        while self.buf.len() - at >= HEADER {
            let head = &self.buf[at..at + HEADER];
            let stream = Stream::from_byte(head[0]).ok_or(FrameError::UnknownStream(head[0]))?;
            let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
            if len > MAX_FRAME {
                return Err(FrameError::TooLarge(len));
            }
            if self.buf.len() - at - HEADER < len {
                break;
            }
            let payload = self.buf[at + HEADER..at + HEADER + len].to_vec();
            frames.push(Frame { stream, payload });
            at += HEADER + len;
        }
        self.buf.drain(..at);
        Ok(frames)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_survive_any_chunking() {
        let mut wire = encode(Stream::Stdout, b"hello");
        wire.extend(encode(Stream::Responses, b"{\"id\": 1}\n"));
        wire.extend(encode(Stream::Stderr, b""));
        wire.extend(encode(Stream::Thaw, b""));
        wire.extend(encode(Stream::Requests, b"{\"type\": \"exec\"}\n"));
        for split in 0..wire.len() {
            let mut d = Decoder::default();
            let mut frames = d.feed(&wire[..split]).unwrap();
            frames.extend(d.feed(&wire[split..]).unwrap());
            assert_eq!(
                frames,
                vec![
                    Frame {
                        stream: Stream::Stdout,
                        payload: b"hello".to_vec()
                    },
                    Frame {
                        stream: Stream::Responses,
                        payload: b"{\"id\": 1}\n".to_vec()
                    },
                    Frame {
                        stream: Stream::Stderr,
                        payload: Vec::new()
                    },
                    Frame {
                        stream: Stream::Thaw,
                        payload: Vec::new()
                    },
                    Frame {
                        stream: Stream::Requests,
                        payload: b"{\"type\": \"exec\"}\n".to_vec()
                    },
                ]
            );
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_stream() {
        assert_eq!(
            Decoder::default().feed(&[9, 0, 0, 0, 0]),
            Err(FrameError::UnknownStream(9))
        );
        let mut huge = vec![2u8];
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            Decoder::default().feed(&huge),
            Err(FrameError::TooLarge(_))
        ));
    }
}
