//! A socket wrapper that fails a write which makes no progress for
//! [`WRITE_STALL`]. hyper has no write timeout, so a client that sends
//! requests but never reads the answers (a zero receive window, or many
//! pipelined `GET /metrics`) could otherwise hold its connection slot for
//! ever once the socket buffers are full. Reads pass through untouched:
//! their deadlines are hyper's header timeout and the body deadline.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// How long one write may wait for the client to make room.
pub const WRITE_STALL: Duration = Duration::from_secs(10);

pub struct WriteDeadline<T> {
    inner: T,
    limit: Duration,
    /// Running while a write (or flush) is blocked; reset by any progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<T> WriteDeadline<T> {
    pub fn new(inner: T, limit: Duration) -> WriteDeadline<T> {
        WriteDeadline {
            inner,
            limit,
            stalled: None,
        }
    }

    /// Passes a finished poll through (and clears the timer); on Pending,
    /// turns a stall longer than the limit into a `TimedOut` error.
    fn watch<R>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        if polled.is_ready() {
            self.stalled = None;
            return polled;
        }
        let limit = self.limit;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        if timer.as_mut().poll(cx).is_ready() {
            self.stalled = None;
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "client did not read the response in time",
            )));
        }
        Poll::Pending
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteDeadline<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A peer that never reads: the write fails once the pipe is full and
    /// the limit has passed, instead of waiting for ever.
    #[tokio::test]
    async fn a_write_nobody_reads_fails_after_the_limit() {
        let (ours, _theirs) = tokio::io::duplex(64);
        let mut w = WriteDeadline::new(ours, Duration::from_millis(50));
        let err = w.write_all(&[0u8; 1024]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }

    /// A peer that reads gets everything.
    #[tokio::test]
    async fn a_reading_peer_gets_everything() {
        let (ours, mut theirs) = tokio::io::duplex(64);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut theirs, &mut got)
                .await
                .unwrap();
            got.len()
        });
        let mut w = WriteDeadline::new(ours, Duration::from_secs(30));
        w.write_all(&[7u8; 4096]).await.unwrap();
        w.shutdown().await.unwrap();
        drop(w);
        assert_eq!(reader.await.unwrap(), 4096);
    }
}
