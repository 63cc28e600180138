//! Tests only: a local HTTP/1.1 API on port 0 (the listener is kept, never
//! bound and released) that answers each request with what `answer` says
//! for its path and query, one request per connection, and counts them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

pub(crate) type Answer = Arc<dyn Fn(&str) -> (u16, String) + Send + Sync>;
/// An answer with extra response headers (Okta's `Link`).
pub(crate) type HeadedAnswer =
    Arc<dyn Fn(&str) -> (u16, Vec<(String, String)>, String) + Send + Sync>;

pub(crate) struct FakeApi {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    pub requests: Arc<AtomicUsize>,
}

impl FakeApi {
    pub(crate) async fn start(answer: Answer) -> FakeApi {
        FakeApi::start_with_headers(Arc::new(move |target: &str| {
            let (status, body) = answer(target);
            (status, Vec::new(), body)
        }))
        .await
    }

    pub(crate) async fn start_with_headers(answer: HeadedAnswer) -> FakeApi {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&requests);
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let answer = Arc::clone(&answer);
                let counted = Arc::clone(&counted);
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match sock.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    counted.fetch_add(1, Ordering::SeqCst);
                    let text = String::from_utf8_lossy(&head);
                    let target = text.split(' ').nth(1).unwrap_or("/").to_owned();
                    let (status, headers, body) = answer(&target);
                    let extra: String = headers
                        .iter()
                        .map(|(k, v)| format!("{k}: {v}\r\n"))
                        .collect();
                    let reply = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n{extra}\r\n{body}",
                        body.len()
                    );
                    let _ = sock.write_all(reply.as_bytes()).await;
                    let _ = sock.shutdown().await;
                });
            }
        });
        FakeApi { base, requests }
    }

    pub(crate) fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// The value of `key` in a request target's query (percent-decoded).
pub(crate) fn query(target: &str, key: &str) -> Vec<String> {
    let Some((_, q)) = target.split_once('?') else {
        return Vec::new();
    };
    url::form_urlencoded::parse(q.as_bytes())
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
        .collect()
}
