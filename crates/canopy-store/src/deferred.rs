//! Log writes deferred to the end of a server's read pass.
//!
//! With [`Durability::Wal`](crate::Durability::Wal) each write reaches the OS
//! before it returns: one `write(2)` to the log per write. A server answers
//! all the requests of one read from a connection together, so it may let
//! their writes wait in the log's buffer and write them out in one system
//! call before it sends any answer ([`Store::flush_log`](crate::Store::flush_log)):
//! what the client hears acknowledged has reached the OS, as before.
//!
//! The deferral is per thread and holds only inside [`log_deferred`]: a write
//! anywhere else (a background task, a lock service, a test) reaches the OS
//! before it returns, so forgetting to flush is impossible outside a pass.

use std::cell::Cell;

thread_local! {
    static DEFERRING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with this thread's log writes left buffered. The caller must call
/// [`Store::flush_log`](crate::Store::flush_log) before it lets anyone learn of
/// what `f` wrote.
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

/// Whether this thread's log writes are being deferred.
pub(crate) fn deferring() -> bool {
    DEFERRING.with(Cell::get)
}

#[cfg(test)]
mod tests {
    use super::log_deferred;
    use crate::{Batch, Durability, RocksStore, Store};
    use std::path::Path;

    const CF: &str = "t";

    /// Bytes the OS holds of the database's write-ahead logs.
    fn log_bytes(dir: &Path) -> u64 {
        let logs = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap()).filter(|e| e.file_name().to_string_lossy().ends_with(".log"));
        logs.map(|e| e.metadata().unwrap().len()).sum()
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
}
