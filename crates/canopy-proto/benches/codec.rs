//! Micro-benchmarks of what every request pays before it reaches a handler:
//! the frame codec (a stat request and its reply, both ways), path parsing,
//! and the placement hashes (ShardFS's primary, GIGA+'s name hash).
//! `cargo bench -p canopy-proto`; see docs/performance.md.

use bytes::BytesMut;
use canopy_proto::attr::{Attr, FileKind};
use canopy_proto::frame;
use canopy_proto::msg::At;
use canopy_proto::path::NsPath;
use canopy_proto::{giga, placement, Creds, Reply, Request};
use criterion::{black_box, criterion_group, criterion_main, Criterion};

const PATH: &str = "/proj/src/canopy/crates/canopy-proto/src/frame.rs";

fn stat_request() -> Request {
    Request::Stat { at: At::Path(PATH.into()) }
}

fn attr_reply() -> Result<Reply, canopy_proto::Errno> {
    Ok(Reply::Attr(Attr { ino: 0x1234_5678_9abc, kind: FileKind::File, mode: 0o644, uid: 1000, gid: 1000, size: 4096, nlink: 1, rdev: 0, atime: 1_700_000_000_000_000_000, mtime: 1_700_000_000_000_000_000, ctime: 1_700_000_000_000_000_000 }))
}

fn codec(c: &mut Criterion) {
    let creds = Creds { uid: 1000, gid: 1000, groups: vec![27, 100] };
    let req = stat_request();
    let reply = attr_reply();
    let mut out = BytesMut::with_capacity(1 << 16);
    c.bench_function("frame/encode stat request", |b| {
        b.iter(|| {
            out.clear();
            frame::encode_request(&mut out, 7, black_box(&creds), black_box(&req)).unwrap();
        })
    });
    let mut encoded = BytesMut::new();
    frame::encode_request(&mut encoded, 7, &creds, &req).unwrap();
    c.bench_function("frame/parse and decode stat request", |b| {
        b.iter(|| {
            let mut buf = encoded.clone();
            let f = frame::parse(black_box(&mut buf)).unwrap();
            frame::decode_request(&f).unwrap()
        })
    });
    c.bench_function("frame/encode attr reply", |b| {
        b.iter(|| {
            out.clear();
            frame::encode_response(&mut out, 7, 1, black_box(&reply));
        })
    });
    let mut encoded = BytesMut::new();
    frame::encode_response(&mut encoded, 7, 1, &reply);
    c.bench_function("frame/parse and decode attr reply", |b| {
        b.iter(|| {
            let mut buf = encoded.clone();
            let f = frame::parse(black_box(&mut buf)).unwrap();
            frame::decode_response(&f).unwrap()
        })
    });
}

fn paths(c: &mut Criterion) {
    c.bench_function("path/parse 7 components", |b| b.iter(|| NsPath::parse(black_box(PATH)).unwrap()));
    let p = NsPath::parse(PATH).unwrap();
    c.bench_function("placement/shardfs primary", |b| b.iter(|| placement::primary(black_box(&p), 64)));
    c.bench_function("placement/giga name hash", |b| b.iter(|| giga::name_hash(black_box("frame.rs"))));
}

criterion_group!(benches, codec, paths);
criterion_main!(benches);
