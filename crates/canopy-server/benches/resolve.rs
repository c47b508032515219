//! Micro-benchmarks of the pure logic on a server's path: ShardFS's path
//! resolution against the replicated directory table (a search check per
//! ancestor) and the permission check alone. `cargo bench -p canopy-server`;
//! see docs/performance.md.

use canopy_posix::perm::{self, Owner};
use canopy_proto::attr::access;
use canopy_proto::msg::DirLookup;
use canopy_proto::path::NsPath;
use canopy_proto::Creds;
use canopy_server::shardfs::dirtable::{DirTable, ROOT_ID};
use canopy_server::shardfs::resolve;
use criterion::{black_box, criterion_group, criterion_main, Criterion};

/// A table of `fanout` directories at each of `depth` levels, and the
/// deepest path through it.
fn table(depth: usize, fanout: usize) -> (DirTable, NsPath) {
    let mut t = DirTable::new(DirLookup { id: ROOT_ID, mode: 0o755, uid: 0, gid: 0 });
    let (mut parent, mut path, mut next) = (ROOT_ID, String::new(), ROOT_ID + 1);
    for level in 0..depth {
        for i in 0..fanout {
            t.insert(parent, &format!("d{level}-{i}"), DirLookup { id: next + i as u64, mode: 0o750, uid: 1000, gid: 100 });
        }
        path.push_str(&format!("/d{level}-0"));
        parent = next;
        next += fanout as u64;
    }
    path.push_str("/file");
    (t, NsPath::parse(&path).unwrap())
}

fn resolution(c: &mut Criterion) {
    let user = Creds { uid: 2000, gid: 2000, groups: vec![27, 100] };
    for depth in [3, 8] {
        let (t, p) = table(depth, 16);
        c.bench_function(&format!("resolve/parent of a depth-{} path, as a user", depth + 1), |b| {
            b.iter(|| resolve::resolve_parent(black_box(&t), black_box(&user), black_box(&p)).unwrap())
        });
    }
}

fn permission(c: &mut Criterion) {
    let dir = Owner::of_dir(&DirLookup { id: 9, mode: 0o750, uid: 1000, gid: 100 });
    let member = Creds { uid: 2000, gid: 2000, groups: vec![27, 100] };
    let other = Creds { uid: 3000, gid: 3000, groups: (1..32).collect() };
    c.bench_function("perm/search by a group member", |b| b.iter(|| perm::allows(black_box(&member), dir, true, access::X)));
    c.bench_function("perm/search refused, 31 groups", |b| b.iter(|| perm::allows(black_box(&other), dir, true, access::X)));
}

criterion_group!(benches, resolution, permission);
criterion_main!(benches);
