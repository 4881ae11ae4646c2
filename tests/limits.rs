//! The limits that keep hostile and broken clients from starving others (docs/limits.md): the
//! memory budget of request bodies, the eviction of silent connections when every slot is taken,
//! and the write timeout. Each test waits on what a client can observe (an answer, a closed
//! connection), within `WAIT`; none asserts a duration.
// Tests fail by panicking: they unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use tokio::io::AsyncWriteExt;

/// A request head for `POST path` with a JSON body of `len` bytes.
fn post_head(path: &str, len: usize) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {len}\r\n\r\n"
    )
}

/// One valid event padded with spaces to `len` bytes.
fn padded_event(len: usize) -> Vec<u8> {
    let mut body = serde_json::to_vec(&event("padded.example")).unwrap();
    body.resize(len, b' ');
    body
}

/// While one large upload holds the memory budget (its body charged, not all sent), another
/// large request is refused with 503, `Retry-After` and the interface's own error body, before
/// its body is read; small requests go on being served; once the first upload completes, the
/// refused one succeeds when sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_body_is_refused_while_the_memory_budget_is_spent() {
    const BODY: usize = 900 * 1024;
    let s = TestServer::start_with(|c| {
        // One 900 KiB batch (charged three times its size) fits, two do not.
        c.limits.memory_budget = 4 << 20;
        c.limits.budget_wait = Duration::from_millis(1);
    })
    .await;
    let (_, key) = s.create_org("a");
    let path = format!("/1.0/events?customerKey={key}");
    let body = padded_event(BODY);

    // The holder: its head and half its body, then a pause.
    let mut holder = s.connect().await.unwrap();
    holder
        .write_all(post_head(&path, BODY).as_bytes())
        .await
        .unwrap();
    holder.write_all(&body[..BODY / 2]).await.unwrap();
    holder.flush().await.unwrap();

    // The holder's charge is taken once the server has its head: until then another large
    // request may still get through, so send one until it is refused.
    let ct = [("content-type", "application/json")];
    let refused = {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let r = s.request("POST", &path, &ct, Some(body.clone())).await;
            if r.status == 503 {
                break r;
            }
            assert_eq!(r.status, 202, "{}", r.text());
            assert!(
                tokio::time::Instant::now() < deadline,
                "never refused while the budget was held"
            );
        }
    };
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(refused.header("connection"), Some("close"));
    let b = refused.json();
    assert_eq!(b["code"], "ServiceUnavailableError");
    assert_eq!(b["statusCode"], 503);
    // The management interface's own shape.
    let r = s
        .request(
            "POST",
            "/v1/organizations/1/sites",
            &ct,
            Some(vec![b' '; 64 * 1024]),
        )
        .await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_mgmt_error(&r, 503, "Retry later");
    assert_eq!(r.header("retry-after"), Some("1"));

    // Small requests never wait for the budget.
    let r = s.post_json(&path, &event("small.example")).await;
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(
        s.get(&format!("/1.0/domains?customerKey={key}"))
            .await
            .status,
        200
    );

    // The holder completes; its charge is released; the large request goes through.
    holder.write_all(&body[BODY / 2..]).await.unwrap();
    holder.flush().await.unwrap();
    let answer = read_response(&mut holder).await;
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    let r = s.request("POST", &path, &ct, Some(body)).await;
    assert_eq!(r.status, 202, "{}", r.text());
    s.stop().await;
}

/// A body of unknown length (chunked) is charged as it arrives: once it needs more than the
/// budget has left, it is refused with 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_is_charged_as_it_arrives() {
    const HELD: usize = 600 * 1024;
    let s = TestServer::start_with(|c| {
        c.limits.memory_budget = 2 << 20;
        c.limits.budget_wait = Duration::from_millis(1);
    })
    .await;
    let (_, key) = s.create_org("a");
    let path = format!("/1.0/events?customerKey={key}");
    // The holder takes three times 600 KiB of the 2 MiB.
    let held = padded_event(HELD);
    let mut holder = s.connect().await.unwrap();
    holder
        .write_all(post_head(&path, HELD).as_bytes())
        .await
        .unwrap();
    holder.write_all(&held[..1000]).await.unwrap();
    holder.flush().await.unwrap();
    // 512 KiB in chunks: the first fits in what is left, the following ones do not. (Sent again
    // until refused: the holder's charge is taken once the server has its head.)
    let chunked = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    let body = padded_event(512 * 1024);
    let deadline = tokio::time::Instant::now() + WAIT;
    let answer = loop {
        let mut io = s.connect().await.unwrap();
        io.write_all(chunked.as_bytes()).await.unwrap();
        for chunk in body.chunks(64 * 1024) {
            let framed = format!("{:x}\r\n", chunk.len());
            if io.write_all(framed.as_bytes()).await.is_err()
                || io.write_all(chunk).await.is_err()
                || io.write_all(b"\r\n").await.is_err()
            {
                break;
            }
        }
        let _ = io.write_all(b"0\r\n\r\n").await;
        let _ = io.flush().await;
        let answer = read_response(&mut io).await;
        if !answer.starts_with("HTTP/1.1 202") {
            break answer;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never refused while the budget was held"
        );
    };
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("ServiceUnavailableError"), "{answer}");
    // Once the holder is done, the budget is whole again.
    holder.write_all(&held[1000..]).await.unwrap();
    holder.flush().await.unwrap();
    assert!(read_response(&mut holder).await.starts_with("HTTP/1.1 202"));
    let mut io = s.connect().await.unwrap();
    io.write_all(chunked.as_bytes()).await.unwrap();
    for chunk in body.chunks(64 * 1024) {
        io.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .await
            .unwrap();
        io.write_all(chunk).await.unwrap();
        io.write_all(b"\r\n").await.unwrap();
    }
    io.write_all(b"0\r\n\r\n").await.unwrap();
    io.flush().await.unwrap();
    let answer = read_response(&mut io).await;
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    s.stop().await;
}

/// When every slot is taken by connections that send no complete request head, a new client
/// gets the slot of the one that has waited longest; a connection in the middle of a request is
/// left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_closed_for_a_new_client_when_slots_run_out() {
    let s = TestServer::start_with(|c| {
        c.limits.max_connections = 3;
        c.limits.eviction_grace = Duration::from_millis(1);
    })
    .await;
    let (_, key) = s.create_org("a");
    let path = format!("/1.0/events?customerKey={key}");
    // An upload in progress: its head and part of its body.
    let mut uploading = s.connect().await.unwrap();
    uploading
        .write_all(post_head(&path, 1000).as_bytes())
        .await
        .unwrap();
    uploading
        .write_all(&padded_event(1000)[..500])
        .await
        .unwrap();
    uploading.flush().await.unwrap();
    // Two slow heads (`slowhttptest -H`): a request line and a header, then nothing.
    let mut slow = Vec::new();
    for _ in 0..2 {
        let mut io = s.connect().await.unwrap();
        io.write_all(b"GET /1.0/domains HTTP/1.1\r\nhost: x\r\n")
            .await
            .unwrap();
        io.flush().await.unwrap();
        slow.push(io);
    }
    // Every slot is taken: two new clients are served, keeping their connections open. (The
    // readiness probe's connection may still hold a slot for a moment: then a slow head is
    // closed for it, or it goes by itself, and the same holds.)
    let mut served = Vec::new();
    for _ in 0..2 {
        let mut io = s.connect().await.unwrap();
        io.write_all(
            format!("GET /1.0/domains?customerKey={key} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let answer = read_response(&mut io).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        served.push(io);
    }
    // Both slow heads were closed to make room (before the clients that completed a request);
    // the upload was not.
    for io in &mut slow {
        assert!(closed_within(io, WAIT).await, "a slow head kept its slot");
    }
    uploading
        .write_all(&padded_event(1000)[500..])
        .await
        .unwrap();
    uploading.flush().await.unwrap();
    let answer = read_response(&mut uploading).await;
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    s.stop().await;
}

/// A client that sends requests and never reads the answers is dropped once an answer has made
/// no progress for the write timeout: it no longer holds its slot, nor the answers queued for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_is_dropped() {
    let s = TestServer::start_with(|c| {
        c.limits.write_timeout = Duration::from_millis(300);
    })
    .await;
    let (_, key) = s.create_org("a");
    // Each answer lists 10,000 bad elements, some 300 KiB: the socket buffers fill after a few.
    let mut bad = b"[".to_vec();
    for i in 0..10_000 {
        bad.extend_from_slice(if i == 0 { b"{}" } else { b",{}" });
    }
    bad.push(b']');
    let request = [
        post_head(&format!("/1.0/events?customerKey={key}"), bad.len()).into_bytes(),
        bad,
    ]
    .concat();
    let io = s.connect().await.unwrap();
    let (_rd, mut wr) = tokio::io::split(io);
    // Pipelined requests, never reading: the server stops reading them once its answers are
    // stuck, and then drops the connection, which fails the writes.
    let dropped = tokio::time::timeout(WAIT, async {
        loop {
            if wr.write_all(&request).await.is_err() || wr.flush().await.is_err() {
                return;
            }
        }
    })
    .await;
    assert!(
        dropped.is_ok(),
        "the connection of a client that never reads was kept"
    );
    // The server still serves (the slot came back).
    assert_eq!(
        s.get(&format!("/1.0/domains?customerKey={key}"))
            .await
            .status,
        200
    );
    s.stop().await;
}
