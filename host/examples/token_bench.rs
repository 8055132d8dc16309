//! Delegation-token benchmarks (docs/benchmarks.md, "Delegation tokens").
//!
//! ```text
//! token_bench create  --bootstrap H:P --user U --password P [--clients 16] [--warmup 5] [--duration 20]
//! token_bench replay  --dir DIR --tokens 1000000
//! token_bench churn   --dir DIR --cycles 1000000 [--clients 64]
//! ```
//!
//! - `create`: `--clients` connections, each authenticated with SCRAM-SHA-512, each sending
//!   CreateDelegationToken v3 then ExpireDelegationToken v2 (period -1, so the token set stays
//!   small) back to back; prints the latency percentiles of both. Works against Portcullis and
//!   against Kafka's SASL listener alike.
//! - `replay`: writes `--tokens` token records into a fresh store in `--dir` (in large batches),
//!   then times what a node does at start: open and verify the log, replay it into the token
//!   manager (HMAC of every token).
//! - `churn`: `--cycles` create-then-expire cycles through the store writer (group commit,
//!   compaction as the node runs it), `--clients` at a time; prints the largest and the final log
//!   size, compactions and fsyncs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    CreateDelegationTokenRequest, ExpireDelegationTokenRequest, RequestHeader, ResponseHeader,
    SaslAuthenticateRequest, SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use portcullis::credentials::ScramMechanism;
use portcullis::login::SaslClientExchange;
use portcullis::principal::Principal;
use portcullis::secret::Secret;
use portcullis::store::{AppendBatch, MetadataStore};
use portcullis::tokens::{CreateRequest, TokenConfig, TokenManager};
use portcullis_host::store_writer::StoreWriter;
use portcullis_plugin_scram::{ScramClient, ScramTokenCrypto};
use portcullis_plugin_stores::FileMetadataStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn num(args: &[String], name: &str, default: u64) -> u64 {
    arg(args, name).map_or(default, |v| v.parse().expect(name))
}

fn now_ms() -> i64 {
    portcullis_host::services::now_ms()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("create") => create(&args),
        Some("replay") => replay(&args),
        Some("churn") => churn(&args),
        _ => eprintln!("usage: token_bench create|replay|churn …  (see the source)"),
    }
}

// ---- create: over the network ---------------------------------------------------------------------

struct Conn {
    stream: TcpStream,
    correlation: i32,
}

impl Conn {
    async fn call<R: Request>(&mut self, request: &R, version: i16) -> R::Response {
        self.correlation += 1;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(StrBytes::from_static_str("token-bench")));
        let mut out = BytesMut::new();
        out.extend_from_slice(&[0; 4]);
        header.encode(&mut out, R::header_version(version)).unwrap();
        request.encode(&mut out, version).unwrap();
        let size = (out.len() - 4) as i32;
        out[..4].copy_from_slice(&size.to_be_bytes());
        self.stream.write_all(&out).await.unwrap();
        let len = self.stream.read_i32().await.unwrap() as usize;
        let mut body = BytesMut::zeroed(len);
        self.stream.read_exact(&mut body).await.unwrap();
        let mut body: Bytes = body.freeze();
        let h = ResponseHeader::decode(&mut body, R::Response::header_version(version)).unwrap();
        assert_eq!(h.correlation_id, self.correlation);
        R::Response::decode(&mut body, version).unwrap()
    }

    async fn login(bootstrap: &str, user: &str, password: &str) -> Conn {
        let stream = TcpStream::connect(bootstrap).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let mut conn = Conn {
            stream,
            correlation: 0,
        };
        let h = conn
            .call(
                &SaslHandshakeRequest::default()
                    .with_mechanism(StrBytes::from_static_str("SCRAM-SHA-512")),
                1,
            )
            .await;
        assert_eq!(h.error_code, 0, "handshake");
        let mut client = ScramClient::new(
            ScramMechanism::Sha512,
            user.to_owned(),
            Secret::new(password),
        );
        let mut token = client.initial().unwrap();
        loop {
            let r = conn
                .call(
                    &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token)),
                    2,
                )
                .await;
            assert_eq!(r.error_code, 0, "login: {:?}", r.error_message);
            match client.step(&r.auth_bytes).unwrap() {
                Some(next) => token = next,
                None => break,
            }
        }
        conn
    }
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

fn create(args: &[String]) {
    let bootstrap = arg(args, "--bootstrap").expect("--bootstrap");
    let user = arg(args, "--user").expect("--user");
    let password = arg(args, "--password").expect("--password");
    let clients = num(args, "--clients", 16);
    let warmup = Duration::from_secs(num(args, "--warmup", 5));
    let duration = Duration::from_secs(num(args, "--duration", 20));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (mut creates, mut expires) = runtime.block_on(async move {
        let start = Instant::now();
        let tasks: Vec<_> = (0..clients)
            .map(|_| {
                let (bootstrap, user, password) =
                    (bootstrap.clone(), user.clone(), password.clone());
                tokio::spawn(async move {
                    let mut conn = Conn::login(&bootstrap, &user, &password).await;
                    let (mut c, mut e) = (Vec::new(), Vec::new());
                    while start.elapsed() < warmup + duration {
                        let t0 = Instant::now();
                        let r = conn
                            .call(
                                &CreateDelegationTokenRequest::default().with_max_lifetime_ms(-1),
                                3,
                            )
                            .await;
                        let created = t0.elapsed();
                        assert_eq!(r.error_code, 0, "create");
                        let t1 = Instant::now();
                        let x = conn
                            .call(
                                &ExpireDelegationTokenRequest::default()
                                    .with_hmac(r.hmac.clone())
                                    .with_expiry_time_period_ms(-1),
                                2,
                            )
                            .await;
                        let expired = t1.elapsed();
                        assert_eq!(x.error_code, 0, "expire");
                        if start.elapsed() > warmup {
                            c.push(created.as_micros() as u64);
                            e.push(expired.as_micros() as u64);
                        }
                    }
                    (c, e)
                })
            })
            .collect();
        let (mut c, mut e) = (Vec::new(), Vec::new());
        for t in tasks {
            let (a, b) = t.await.unwrap();
            c.extend(a);
            e.extend(b);
        }
        (c, e)
    });
    creates.sort_unstable();
    expires.sort_unstable();
    let secs = duration.as_secs_f64();
    for (name, v) in [("create", &creates), ("expire", &expires)] {
        println!(
            "{name}: {} ops in {secs:.0} s ({:.0}/s), p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            v.len(),
            v.len() as f64 / secs,
            percentile(v, 0.50),
            percentile(v, 0.99),
            percentile(v, 1.0)
        );
    }
}

// ---- replay: start-up with many tokens ---------------------------------------------------------------

fn manager() -> Arc<TokenManager> {
    Arc::new(TokenManager::new(
        TokenConfig::new(Secret::new("bench-secret")),
        Arc::new(ScramTokenCrypto),
        now_ms(),
    ))
}

fn replay(args: &[String]) {
    let dir = std::path::PathBuf::from(arg(args, "--dir").expect("--dir"));
    let tokens = num(args, "--tokens", 1_000_000);
    // `--reuse`: measure the start-up on the log a previous run wrote.
    let reuse = args.iter().any(|a| a == "--reuse");
    if !reuse {
        let _ = std::fs::remove_dir_all(&dir);
    }
    if !reuse {
        let store = FileMetadataStore::open(&dir).unwrap();
        let writer_manager = manager();
        let t0 = Instant::now();
        let mut batch = Vec::new();
        for i in 0..tokens {
            let owner = Principal::user(format!("user-{}", i % 1000));
            let token = writer_manager
                .create(
                    &CreateRequest {
                        requester: owner.clone(),
                        owner,
                        renewers: vec![Principal::user("ops")],
                        max_lifetime_ms: -1,
                    },
                    now_ms(),
                )
                .unwrap();
            batch.extend(token.batch.records);
            if batch.len() == 20_000 {
                store
                    .append_batch(&AppendBatch::new(std::mem::take(&mut batch)))
                    .unwrap();
            }
        }
        if !batch.is_empty() {
            store.append_batch(&AppendBatch::new(batch)).unwrap();
        }
        println!(
            "wrote {tokens} tokens in {:.1} s; log {} MB",
            t0.elapsed().as_secs_f64(),
            store.stats().log_bytes / 1_000_000
        );
    }
    // What a node does at start: open (read and verify), then replay into the views.
    let t0 = Instant::now();
    let store = FileMetadataStore::open(&dir).unwrap();
    let opened = t0.elapsed();
    let tokens_view = manager();
    let view = Arc::clone(&tokens_view);
    store
        .subscribe(0, Box::new(move |records| view.replay(records, now_ms())))
        .unwrap();
    store.release_startup_cache();
    let total = t0.elapsed();
    println!(
        "start-up with {} tokens: open + verify {:.2} s, replay into the token manager {:.2} s, total {:.2} s",
        tokens_view.len(),
        opened.as_secs_f64(),
        (total - opened).as_secs_f64(),
        total.as_secs_f64()
    );
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        if let Some(line) = status.lines().find(|l| l.starts_with("VmHWM")) {
            println!("peak RSS: {}", line.trim_start_matches("VmHWM:").trim());
        }
    }
}

// ---- churn: create + expire cycles with compaction ----------------------------------------------------

fn churn(args: &[String]) {
    let dir = std::path::PathBuf::from(arg(args, "--dir").expect("--dir"));
    let cycles = num(args, "--cycles", 1_000_000);
    let clients = num(args, "--clients", 64);
    let _ = std::fs::remove_dir_all(&dir);
    let store = Arc::new(FileMetadataStore::open(&dir).unwrap());
    let writer = StoreWriter::start(Arc::clone(&store) as Arc<dyn MetadataStore>).unwrap();
    let tokens = manager();
    let view = Arc::clone(&tokens);
    store
        .subscribe(
            0,
            Box::new(move |records| {
                view.apply(records, now_ms());
            }),
        )
        .unwrap();
    let largest = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let t0 = Instant::now();
    runtime.block_on(async {
        let tasks: Vec<_> = (0..clients)
            .map(|c| {
                let (writer, tokens, store, largest, done) = (
                    writer.clone(),
                    Arc::clone(&tokens),
                    Arc::clone(&store),
                    Arc::clone(&largest),
                    Arc::clone(&done),
                );
                tokio::spawn(async move {
                    let owner = Principal::user(format!("client-{c}"));
                    while done.fetch_add(1, Ordering::Relaxed) < cycles {
                        let token = tokens
                            .create(
                                &CreateRequest {
                                    requester: owner.clone(),
                                    owner: owner.clone(),
                                    renewers: vec![],
                                    max_lifetime_ms: -1,
                                },
                                now_ms(),
                            )
                            .unwrap();
                        writer.persist(token.batch).await.unwrap();
                        let removal = tokens.expire(&owner, &token.hmac, -1, now_ms()).unwrap();
                        writer.persist(removal.batch).await.unwrap();
                        largest.fetch_max(store.stats().log_bytes, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    let stats = store.stats();
    println!(
        "{cycles} create+expire cycles in {:.0} s: largest log {} KB, final log {} KB ({} records), \
         {} compactions, {} log fsyncs for {} appends ({:.1} appends per fsync), {} tokens left",
        t0.elapsed().as_secs_f64(),
        largest.load(Ordering::Relaxed) / 1000,
        stats.log_bytes / 1000,
        stats.records_in_file,
        stats.compactions,
        stats.log_syncs,
        stats.batches,
        stats.batches as f64 / stats.log_syncs.max(1) as f64,
        tokens.len()
    );
}
