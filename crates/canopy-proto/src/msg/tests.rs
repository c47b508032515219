//! Pins the wire: the opcode table, every reply's tag, and the ids made
//! from transactions.

use super::*;
use crate::attr::FileKind;

#[test]
fn directory_ids_from_transactions_never_meet_server_allocated_ones() {
    let server_ids = [1u64 << 48, (1 << 48) | ((1 << 48) - 1), (0xFFFF << 48) | 5];
    for txn in [1, 2, 12_345, (1 << 47) - 1] {
        let id = dir_id_of_txn(txn).unwrap();
        assert!(is_txn_dir_id(id) && id != 1 && !server_ids.contains(&id));
        assert_eq!(txn_of_dir_id(id), Some(txn));
        assert_ne!(dir_id_of_txn(txn + 1), Some(id));
    }
    assert!(server_ids.iter().all(|id| !is_txn_dir_id(*id) && txn_of_dir_id(*id).is_none()));
    assert!(!is_txn_dir_id(1), "the root");
    assert_eq!(dir_id_of_txn(1 << 47), None);
}

/// The wire's request table. Append new requests at the end (of the enum and
/// of this list); never change or reuse a line.
const PINNED: &[(&str, u16)] = &[
    ("Ping", 0x0001),
    ("Stat", 0x0002),
    ("Create", 0x0003),
    ("Unlink", 0x0004),
    ("SetAttr", 0x0005),
    ("Readlink", 0x0006),
    ("Access", 0x0007),
    ("ReadDir", 0x0008),
    ("LinkShare", 0x0009),
    ("LinkInsert", 0x000A),
    ("InodeStat", 0x000B),
    ("InodeSetAttr", 0x000C),
    ("InodeLinkDelta", 0x000D),
    ("RenameLocal", 0x000E),
    ("RenameOut", 0x000F),
    ("RenameIn", 0x0010),
    ("RenameOutCommit", 0x0011),
    ("Mkdir", 0x0101),
    ("Rmdir", 0x0102),
    ("DirSetAttr", 0x0103),
    ("RenameDir", 0x0104),
    ("Migrate", 0x0105),
    ("DirProbe", 0x0106),
    ("RecoveryStat", 0x0107),
    ("DirSync", 0x0108),
    ("Fence", 0x0109),
    ("Unfence", 0x010A),
    ("Adopt", 0x010B),
    ("Release", 0x010C),
    ("ReadData", 0x0012),
    ("WriteData", 0x0013),
    ("Spilled", 0x0014),
    ("Extend", 0x0015),
    ("TouchDir", 0x0016),
    ("Stats", 0x0017),
    ("Fsck", 0x0018),
    ("Lock", 0x0201),
    ("Renew", 0x0202),
    ("Unlock", 0x0203),
    ("ListTxns", 0x0204),
    ("Amend", 0x0205),
    ("Delegate", 0x0019),
    ("IxLookup", 0x0301),
    ("IxMkdir", 0x0302),
    ("IxMkHeader", 0x0303),
    ("IxSeal", 0x0304),
    ("IxRmdir", 0x0305),
    ("IxDropHeader", 0x0306),
    ("IxDirSetAttr", 0x0307),
    ("IxHeaderSet", 0x0308),
    ("IxRenameDir", 0x0309),
    ("IxRenameDirOut", 0x030A),
    ("IxRenameDirIn", 0x030B),
    ("IxRenameDirCommit", 0x030C),
    ("IxBulkInsert", 0x030D),
    ("IxSplitIn", 0x030E),
    ("IxReadDir", 0x030F),
    ("IxRenew", 0x0310),
    ("GfProof", 0x0401),
    ("GfVouched", 0x0402),
    ("GfMkdir", 0x0403),
    ("GfRmdirBegin", 0x0404),
    ("GfEmpty", 0x0405),
    ("GfRmdirEnd", 0x0406),
    ("GfDirSetAttr", 0x0407),
    ("GfSubdirs", 0x0408),
    ("GfRenameDirCheck", 0x0409),
    ("GfFreeze", 0x040A),
    ("GfScan", 0x040B),
    ("GfPutRows", 0x040C),
    ("GfDeleteRows", 0x040D),
    ("GfSetSubdirs", 0x040E),
    ("BatchOpen", 0x0501),
    ("BatchList", 0x0502),
    ("BatchStage", 0x0503),
    ("BatchApply", 0x0504),
    ("BatchClose", 0x0505),
    ("ClearFences", 0x010D),
    ("Revoke", 0x010E),
    ("LinkSettle", 0x010F),
    ("LinkPending", 0x0110),
    ("Peer", 0x0601),
    ("Once", 0x0602),
    ("GroupStatus", 0x0603),
    ("GroupChange", 0x0604),
];

#[test]
fn the_opcode_table_is_append_only() {
    assert!(OPCODES.len() >= PINNED.len(), "a request was removed");
    assert_eq!(&OPCODES[..PINNED.len()], PINNED, "an existing request moved or changed its opcode");
    let mut ops: Vec<u16> = OPCODES.iter().map(|(_, o)| *o).collect();
    ops.sort_unstable();
    ops.dedup();
    assert_eq!(ops.len(), OPCODES.len(), "two requests share an opcode");
    for (name, op) in OPCODES {
        assert!(matches!(op >> 8, 0x00..=0x06), "{name}: {op:#06x} is in no family");
        assert_eq!(op_name(*op), Some(*name));
    }
    assert_eq!(op_name(0x0300), None, "no request is 0x0300");
    // The opcode names the payload's variant: a request's postcard tag is its
    // position in the table.
    let stat = Request::Stat { at: "/".into() };
    assert_eq!((stat.opcode(), stat.index(), stat.name()), (0x0002, 1, "Stat"));
    assert_eq!(postcard::to_stdvec(&stat).unwrap()[0] as usize, stat.index());
    let delegate = Request::Delegate { call: NsCall::Stat { path: "/".into() } };
    assert_eq!(postcard::to_stdvec(&delegate).unwrap()[0] as usize, delegate.index());
}

/// Each reply's postcard tag, pinned: a reply inserted before another would
/// change every later tag.
fn pinned_tag(r: &Reply) -> u8 {
    match r {
        Reply::Unit => 0,
        Reply::Pong { .. } => 1,
        Reply::Attr(_) => 2,
        Reply::Redirect { .. } => 3,
        Reply::Dropped { .. } => 4,
        Reply::LinkTarget(_) => 5,
        Reply::Entries { .. } => 6,
        Reply::Shared { .. } => 7,
        Reply::Record(_) => 8,
        Reply::Dir(_) => 9,
        Reply::Moved(_) => 10,
        Reply::Stats(_) => 11,
        Reply::Fsck(_) => 12,
        Reply::Locked { .. } => 13,
        Reply::Recover { .. } => 14,
        Reply::Probe(_) => 15,
        Reply::Txns(_) => 16,
        Reply::Data(_) => 17,
        Reply::Backend { .. } => 18,
        Reply::Spill { .. } => 19,
        Reply::IxEntry { .. } => 20,
        Reply::Bulk { .. } => 21,
        Reply::IxMoved { .. } => 22,
        Reply::IxParts(_) => 23,
        Reply::IxEntries { .. } => 24,
        Reply::IxRenewed(_) => 25,
        Reply::GfProof(_) => 26,
        Reply::GfRows { .. } => 27,
        Reply::Batches(_) => 28,
        Reply::BatchApplied { .. } => 29,
        Reply::RenameChecked { .. } => 30,
        Reply::RenameOfFile => 31,
        Reply::Pending { .. } => 32,
        Reply::PeerReply(_) => 33,
        Reply::NotLeader { .. } => 34,
        Reply::Group(_) => 35,
    }
}

#[test]
fn reply_tags_are_append_only() {
    let attr = Attr { ino: 1, kind: FileKind::File, mode: 0, uid: 0, gid: 0, size: 0, nlink: 1, rdev: 0, atime: 0, mtime: 0, ctime: 0 };
    let fid = Fid::new(1, 2);
    let dir = DirLookup { id: 1, mode: 0, uid: 0, gid: 0 };
    let samples = vec![
        Reply::Unit,
        Reply::Pong { server: 0, servers: 1 },
        Reply::Attr(attr.clone()),
        Reply::Redirect { ino: 1, home: 0 },
        Reply::Dropped { remote: None, freed: None },
        Reply::LinkTarget("t".into()),
        Reply::Entries { entries: vec![], more: false },
        Reply::Shared { ino: 1, home: 0 },
        Reply::Record(Record::Linked { ino: 1, home: 0 }),
        Reply::Dir(dir.clone()),
        Reply::Moved(vec![]),
        Reply::Stats(ServerStats::default()),
        Reply::Fsck(FsckReport::default()),
        Reply::Locked { txn: 1, ticket: 2, waited: false },
        Reply::Recover { txn: 1, ticket: 2, was: 1, lapsed: 1, intent: Intent::Retry { path: "/".into() } },
        Reply::Probe(Some(dir)),
        Reply::Txns(vec![]),
        Reply::Data(vec![]),
        Reply::Backend { fid, size: 0 },
        Reply::Spill { fid, data: vec![], size: 0 },
        Reply::IxEntry { lookup: DirLookup { id: 1, mode: 0, uid: 0, gid: 0 }, depth: 1, parts: crate::giga::PartMap::new(), lease_ms: 1 },
        Reply::Bulk { inserted: 0, rejected: vec![] },
        Reply::IxMoved { dir: 1, parts: crate::giga::PartMap::new() },
        Reply::IxParts(crate::giga::PartMap::new()),
        Reply::IxEntries { entries: vec![], more: false, parts: crate::giga::PartMap::new() },
        Reply::IxRenewed(vec![]),
        Reply::GfProof(crate::giraffa::DirProof { prefix: 1, ino: 1, mode: 0, uid: 0, gid: 0, expires: 0, adds: false, mac: [0; 32] }),
        Reply::GfRows { rows: vec![], more: false },
        Reply::Batches(vec![]),
        Reply::BatchApplied { inserted: 0, landed: 0, rejected: vec![] },
        Reply::RenameChecked { below: false, times: None },
        Reply::RenameOfFile,
        Reply::Pending { counted: vec![], named: vec![] },
        Reply::PeerReply(vec![]),
        Reply::NotLeader { leader: None },
        Reply::Group(GroupInfo::default()),
    ];
    for r in &samples {
        assert_eq!(postcard::to_stdvec(r).unwrap()[0], pinned_tag(r), "{r:?}");
    }
}
