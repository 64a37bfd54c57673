//! HTTP/1.1 message heads: bounded reading and defensive parsing, shared by the client
//! and the server.
//!
//! A head is read up to the blank line and never beyond [`MAX_HEAD`] bytes; a longer one,
//! a line that is not `name: value`, or a status line that is not `HTTP/1.x NNN` is an
//! error, never a panic. Header names are compared case-insensitively.

/// Largest message head read (request or status line plus headers).
pub const MAX_HEAD: usize = 16 << 10;

/// A parsed head: the first line's three parts and the headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub first: [String; 3],
    pub headers: Vec<(String, String)>,
}

impl Head {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// Whether header `name` lists `token` (comma-separated, case-insensitive).
    pub fn has_token(&self, name: &str, token: &str) -> bool {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .flat_map(|(_, v)| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }
}

/// The end of the head in `buf` (the index after the blank line), if it is complete.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

/// Parses a complete head (as delimited by [`head_end`]).
pub fn parse_head(bytes: &[u8]) -> Option<Head> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.split("\r\n");
    let mut parts = lines.next()?.splitn(3, ' ');
    let first = [
        parts.next()?.to_string(),
        parts.next()?.to_string(),
        parts.next().unwrap_or("").to_string(),
    ];
    let mut headers = Vec::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':')?;
        if name.is_empty() || name.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        {
            return None;
        }
        headers.push((name.to_string(), value.trim().to_string()));
    }
    Some(Head { first, headers })
}

/// The status code of a response head (`HTTP/1.0` or `HTTP/1.1`, three digits).
pub fn status(head: &Head) -> Option<u16> {
    if head.first[0] != "HTTP/1.1" && head.first[0] != "HTTP/1.0" {
        return None;
    }
    let code = &head.first[1];
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    code.parse().ok()
}

/// A `Content-Length` header that is not one canonical decimal number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadLength;

/// A `Content-Length` value: decimal digits only (a sign, spaces or two differing values
/// are refused, as request smuggling defences do).
pub fn content_length(head: &Head) -> Result<Option<u64>, BadLength> {
    let mut found: Option<u64> = None;
    for (_, v) in head.headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case("content-length")) {
        if v.is_empty() || v.len() > 19 || !v.bytes().all(|b| b.is_ascii_digit()) {
            return Err(BadLength);
        }
        let n: u64 = v.parse().map_err(|_| BadLength)?;
        if found.is_some_and(|f| f != n) {
            return Err(BadLength);
        }
        found = Some(n);
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_heads_defensively() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\nconnection: Keep-Alive, x\r\n\r\nbody";
        let end = head_end(raw).unwrap();
        let h = parse_head(&raw[..end]).unwrap();
        assert_eq!(status(&h), Some(200));
        assert_eq!(content_length(&h), Ok(Some(12)));
        assert!(h.has_token("Connection", "keep-alive"));
        let bad = |s: &[u8]| parse_head(s).map(|h| status(&h));
        assert_eq!(bad(b"HTTP/1.1 20x OK\r\n\r\n"), Some(None));
        assert_eq!(bad(b"SSH-2.0 200 x\r\n\r\n"), Some(None));
        assert_eq!(bad(b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n"), None);
        assert_eq!(bad(b"\xff\xfe\r\n\r\n"), None);
        let h = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n").unwrap();
        assert_eq!(content_length(&h), Err(BadLength));
        let h = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\ncontent-length: 2\r\n\r\n")
            .unwrap();
        assert_eq!(content_length(&h), Err(BadLength));
    }
}
