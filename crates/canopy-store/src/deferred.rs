//! Log writes deferred to the end of a server's read pass.
//!
//! With [`Durability::Wal`](crate::Durability::Wal) each write reaches the OS
//! before it returns: one `write(2)` to the log per write (with
//! [`Durability::Fsync`](crate::Durability::Fsync), one fsync). A server
//! answers all the requests of one read from a connection together, so it may
//! let their writes wait in the log's buffer and write them out at once
//! before it sends any answer ([`Store::flush_log`](crate::Store::flush_log)):
//! what the client hears acknowledged has reached the OS (or the disk), as
//! before.
//!
//! The deferral is per thread and holds only inside [`in_pass`], which writes
//! the log out at its end: a write anywhere else (a background task, a test,
//! a tool) reaches the OS before it returns, so no caller can defer and forget
//! to flush.

use std::cell::{Cell, RefCell};

thread_local! {
    static DEFERRING: Cell<bool> = const { Cell::new(false) };
    /// Writes this thread made inside a pass and has not yet seen written
    /// out, per store (by its id): one pass touches one or two stores.
    static LEFT: RefCell<Vec<(u64, u64)>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with this thread's log writes left buffered. The caller must call
/// [`Store::flush_log`](crate::Store::flush_log) before it lets anyone learn of
/// what `f` wrote ([`in_pass`] does both).
pub fn log_deferred(f: &mut dyn FnMut()) {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            DEFERRING.with(|d| d.set(self.0));
        }
    }
    let _restore = Restore(DEFERRING.with(|d| d.replace(true)));
    f();
}

/// Runs one read pass's `handlers` with their log writes left buffered, then
/// writes the log out ([`Store::flush_log`](crate::Store::flush_log)): what
/// they wrote is then as durable as `store` makes one write. An error means
/// it may not be.
pub fn in_pass(store: &dyn crate::Store, handlers: &mut dyn FnMut()) -> crate::Result<()> {
    log_deferred(handlers);
    store.flush_log()
}

/// Whether this thread's log writes are being deferred.
pub fn deferring() -> bool {
    DEFERRING.with(Cell::get)
}

/// Counts one write this thread left buffered in store `store`.
pub(crate) fn left_one(store: u64) {
    LEFT.with(|left| {
        let mut left = left.borrow_mut();
        match left.iter_mut().find(|(s, _)| *s == store) {
            Some((_, n)) => *n += 1,
            None => left.push((store, 1)),
        }
    });
}

/// How many writes this thread left buffered in store `store`; forgets them.
pub(crate) fn take_left(store: u64) -> u64 {
    LEFT.with(|left| {
        let mut left = left.borrow_mut();
        let at = left.iter().position(|(s, _)| *s == store);
        at.map_or(0, |i| left.swap_remove(i).1)
    })
}

#[cfg(test)]
mod tests {
    use super::{in_pass, log_deferred};
    use crate::{Batch, Durability, RocksStore, Store};
    use std::path::Path;

    const CF: &str = "t";

    /// Bytes the OS holds of the database's write-ahead logs.
    fn log_bytes(dir: &Path) -> u64 {
        let logs = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap()).filter(|e| e.file_name().to_string_lossy().ends_with(".log"));
        logs.map(|e| e.metadata().unwrap().len()).sum()
    }

    /// Times `store` wrote its log out.
    fn log_writes(store: &dyn Store) -> u64 {
        store.log_counts().unwrap().log_writes
    }

    fn put(store: &dyn Store, key: &str) {
        let mut b = Batch::new();
        b.put(CF, key.as_bytes().to_vec(), b"v".to_vec());
        store.write(b).unwrap();
    }

    #[test]
    fn a_write_is_in_the_log_when_it_returns_except_inside_a_pass_until_the_flush() {
        log_written_at_each_write_or_flush(Durability::Wal);
    }

    #[test]
    fn a_synced_write_too() {
        log_written_at_each_write_or_flush(Durability::Fsync);
    }

    fn log_written_at_each_write_or_flush(durability: Durability) {
        let dir = tempfile::tempdir().unwrap();
        let store = RocksStore::open(dir.path(), &[CF], durability).unwrap();
        let before = log_bytes(dir.path());
        put(&store, "a");
        assert!(log_bytes(dir.path()) > before, "a write outside a pass reaches the OS before it returns");

        let before = log_bytes(dir.path());
        log_deferred(&mut || {
            put(&store, "b");
            put(&store, "c");
        });
        assert_eq!(log_bytes(dir.path()), before, "a pass's writes wait in the log's buffer");
        assert_eq!(store.get(CF, b"c").unwrap(), Some(b"v".to_vec()), "and are read meanwhile");
        store.flush_log().unwrap();
        assert!(log_bytes(dir.path()) > before, "the flush writes them out");

        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| log_deferred(&mut || panic!("a handler broke"))));
        assert!(panicked.is_err());
        let before = log_bytes(dir.path());
        put(&store, "d");
        assert!(log_bytes(dir.path()) > before, "a pass that panicked defers nothing after it");
    }

    #[test]
    fn a_pass_that_wrote_nothing_writes_the_log_out_only_while_another_threads_write_waits() {
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(RocksStore::open(dir.path(), &[CF], Durability::Fsync).unwrap());
        let reading_pass = || in_pass(&*store, &mut || assert!(store.get(CF, b"w").is_ok())).unwrap();
        let n = log_writes(&*store);
        reading_pass();
        assert_eq!(log_writes(&*store), n, "nothing to write out, no fsync");

        let writes = store.log_counts().unwrap().writes;
        in_pass(&*store, &mut || (0..5).for_each(|i| put(&*store, &format!("k{i}")))).unwrap();
        assert_eq!(store.log_counts(), Some(crate::LogCounts { writes: writes + 5, log_writes: n + 1 }), "a pass's five writes, written out once");

        // Another thread's pass has written and not yet flushed: a pass that
        // may have read its write writes the log out before answering.
        let (wrote_tx, wrote_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let writer = {
            let store = store.clone();
            std::thread::spawn(move || {
                log_deferred(&mut || put(&*store, "w"));
                wrote_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                store.flush_log().unwrap();
            })
        };
        wrote_rx.recv().unwrap();
        let before = log_bytes(dir.path());
        reading_pass();
        assert_eq!(log_writes(&*store), n + 2, "the reader wrote the log out");
        assert!(log_bytes(dir.path()) > before, "with the writer's record");
        go_tx.send(()).unwrap();
        writer.join().unwrap();
        assert_eq!(log_writes(&*store), n + 3, "the writer still writes out its own");
        reading_pass();
        assert_eq!(log_writes(&*store), n + 3, "and then nothing waits");
    }

    #[test]
    fn an_ingest_inside_a_pass_writes_the_log_out_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = RocksStore::open(&dir.path().join("db"), &[CF], Durability::Wal).unwrap();
        let table = dir.path().join("t.sst");
        store.write_table(&table, &mut vec![(b"x".to_vec(), b"v".to_vec())].into_iter()).unwrap();
        let logs = dir.path().join("db");
        let before = log_bytes(&logs);
        log_deferred(&mut || {
            put(&store, "id-block");
            store.ingest(CF, std::slice::from_ref(&table)).unwrap();
            assert!(log_bytes(&logs) > before, "the write the table may rest on is out before the table is in");
        });
    }
}
