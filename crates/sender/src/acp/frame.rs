//! Newline-delimited JSON-RPC frames, read with a cap and written byte for byte. A frame is
//! never re-serialized: the bytes read are the bytes written. One over the cap is streamed
//! through unparsed, so a huge frame costs no memory and still arrives whole and in order.
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};

/// Frames up to this size are parsed (ACP carries file contents and images inline).
pub const FRAME_CAP: usize = 8 << 20;

/// One writer shared by a forwarder and the proxy's own frames, so frames never interleave.
pub type Sink = Arc<Mutex<Box<dyn Write + Send>>>;

pub fn sink(w: impl Write + Send + 'static) -> Sink {
    Arc::new(Mutex::new(Box::new(w)))
}

/// Writes one whole frame (with its newline) and flushes it.
pub fn write_frame(sink: &Sink, bytes: &[u8]) -> std::io::Result<()> {
    let mut w = sink.lock().unwrap_or_else(|e| e.into_inner());
    w.write_all(bytes)?;
    w.flush()
}

/// What the reader asks of the forwarder for each frame.
pub enum Verdict {
    Forward,
    /// Not forwarded (a response to a request the proxy answered or sent itself).
    Swallow,
}

/// Reads frames from `r` until EOF, calling `inspect` on each whole frame up to `cap` bytes
/// and forwarding it to `out` unless told to swallow it. Larger frames are forwarded as they
/// arrive, unparsed, and reported to `oversize`. Returns at EOF or when `out` fails.
pub fn pump(
    mut r: impl BufRead,
    out: &Sink,
    cap: usize,
    mut inspect: impl FnMut(&[u8]) -> Verdict,
    mut oversize: impl FnMut(usize),
) -> std::io::Result<()> {
    let mut line: Vec<u8> = Vec::with_capacity(64 * 1024);
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            // EOF: a last frame without its newline still goes through.
            if !line.is_empty() {
                if let Verdict::Forward = inspect(&line) {
                    write_frame(out, &line)?;
                }
            }
            return Ok(());
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) if line.len() + i < cap => {
                line.extend_from_slice(&buf[..=i]);
                r.consume(i + 1);
                if let Verdict::Forward = inspect(&line) {
                    write_frame(out, &line)?;
                }
                line.clear();
                if line.capacity() > 1 << 20 {
                    line.shrink_to(64 * 1024);
                }
            }
            None if line.len() + buf.len() < cap => {
                let n = buf.len();
                line.extend_from_slice(buf);
                r.consume(n);
            }
            _ => {
                let n = stream_oversize(&mut r, out, &line)?;
                oversize(n);
                line.clear();
            }
        }
    }
}

/// Forwards a frame past the cap: what was read so far, then chunks up to and including its
/// newline, holding the writer so nothing lands inside it. Returns the frame's size.
fn stream_oversize(r: &mut impl BufRead, out: &Sink, head: &[u8]) -> std::io::Result<usize> {
    let mut w = out.lock().unwrap_or_else(|e| e.into_inner());
    w.write_all(head)?;
    let mut total = head.len();
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            w.flush()?;
            return Ok(total);
        }
        let (n, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        w.write_all(&buf[..n])?;
        r.consume(n);
        total += n;
        if done {
            w.flush()?;
            return Ok(total);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn run(input: &[u8], cap: usize) -> (Vec<u8>, Vec<Vec<u8>>, Vec<usize>) {
        let got = Shared::default();
        let out = sink(got.clone());
        let mut seen = Vec::new();
        let mut big = Vec::new();
        // A tiny buffer makes frames span many reads.
        let r = std::io::BufReader::with_capacity(7, input);
        pump(
            r,
            &out,
            cap,
            |f| {
                seen.push(f.to_vec());
                Verdict::Forward
            },
            |n| big.push(n),
        )
        .unwrap();
        let bytes = got.0.lock().unwrap().clone();
        (bytes, seen, big)
    }

    #[test]
    fn frames_pass_byte_for_byte_and_oversize_ones_unparsed() {
        let input = b"{\"a\":1}\n{ \"b\" : [1,2] }\r\n0123456789012345678901234567890\n{}\ntail";
        let (bytes, seen, big) = run(input, 20);
        assert_eq!(bytes, input.to_vec());
        assert_eq!(
            seen,
            vec![
                b"{\"a\":1}\n".to_vec(),
                b"{ \"b\" : [1,2] }\r\n".to_vec(),
                b"{}\n".to_vec(),
                b"tail".to_vec()
            ]
        );
        assert_eq!(big, vec![32]);
    }
}
