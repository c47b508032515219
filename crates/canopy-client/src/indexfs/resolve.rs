//! Path resolution under leases: each component looked up on the server
//! holding its name's partition and cached until its lease runs out, renewed
//! in batches, one RPC per server (seed 001's stateless lease caching).

use super::*;

impl IndexFs {
    /// Directory `name` in directory `dir` (0 and "" for the root), from the
    /// cache while its lease lasts, else from the server holding it.
    pub(super) async fn lookup(&self, c: &Creds, dir: u64, name: &str, depth: u32) -> Res<DirLookup> {
        let key = (dir, name.to_string());
        let now = self.clock.now_ms();
        if let Some(hit) = self.cache().get_mut(&key).filter(|h| h.until_ms > now) {
            self.counters.cache_hit();
            hit.used = true;
            return Ok(hit.lookup.clone());
        }
        self.counters.cache_miss();
        let server = self.server_of_entry(dir, name);
        let renew = self.due_for_renewal(server, &key, now);
        if !renew.is_empty() {
            match self.lookup_renewing(c, server, (dir, name.to_string(), depth), renew, now).await {
                // Moved by a split, or about to be: asked alone, the server
                // says where to, or the wait below covers it.
                Err(Errno::EREMCHG | Errno::EINPROGRESS) => {}
                r => return r,
            }
        }
        // A split about to move the entry is waited out, and a redirect
        // followed, here: no caller (recovery among them) sees either.
        let mut split = SplitWait::new(&self.clock);
        loop {
            let server = self.server_of_entry(dir, name);
            match self.rpc_ix(server, c, Request::IxLookup { dir, name: name.to_string(), depth, client: self.client_id }).await {
                Err(Errno::EINPROGRESS) => split.pause(&self.counters).await?,
                // Moved: the bitmap it taught names the server to ask next.
                Err(Errno::EREMCHG) => split.redirected(&self.counters).await?,
                Ok(Reply::IxEntry { lookup, lease_ms, depth, .. }) => {
                    self.cache_entry(key, &lookup, depth, lease_ms, now);
                    return Ok(lookup);
                }
                Ok(other) => return Err(unexpected(other)),
                Err(e) => return Err(e),
            }
        }
    }

    /// The server holding the entry `name` of `dir` (the root's: its home).
    pub(super) fn server_of_entry(&self, dir: u64, name: &str) -> u32 {
        if dir == 0 {
            self.home(ROOT_ID)
        } else {
            self.server_for(dir, name)
        }
    }

    pub(super) fn cache_entry(&self, key: (u64, String), lookup: &DirLookup, depth: u32, lease_ms: u32, now: u64) {
        if lease_ms > 0 {
            let lease_ms = lease_ms as u64;
            self.cache().insert(key, Cached { lookup: lookup.clone(), until_ms: now + lease_ms, lease_ms, depth, used: false });
        }
    }

    /// Other cached entries held by `server` that were used since they were
    /// fetched and whose leases have run out or pass their middle: a lookup
    /// that must ask `server` anyway renews them in the same RPC, so a client
    /// using many directories pays one RPC per server per lease, not one per
    /// directory.
    pub(super) fn due_for_renewal(&self, server: u32, missed: &(u64, String), now: u64) -> Vec<(u64, String, u32)> {
        let cache = self.cache();
        cache
            .iter()
            .filter(|(k, v)| v.used && v.until_ms <= now + v.lease_ms / 2 && *k != missed)
            .filter(|(k, _)| self.server_of_entry(k.0, &k.1) == server)
            .take(RENEW_MAX)
            .map(|(k, v)| (k.0, k.1.clone(), v.depth))
            .collect()
    }

    /// The lookup of `first` with `others` renewed in one `IxRenew`.
    pub(super) async fn lookup_renewing(&self, c: &Creds, server: u32, first: (u64, String, u32), others: Vec<(u64, String, u32)>, now: u64) -> Res<DirLookup> {
        let mut items = vec![first];
        items.extend(others);
        let answers = match self.rpc_ix(server, c, Request::IxRenew { items: items.clone(), client: self.client_id }).await? {
            Reply::IxRenewed(a) if a.len() == items.len() => a,
            other => return Err(unexpected(other)),
        };
        let mut mine = Err(Errno::EIO);
        for (i, ((dir, name, _), answer)) in items.into_iter().zip(answers).enumerate() {
            match &answer {
                Ok((lookup, depth, lease_ms)) => self.cache_entry((dir, name), lookup, *depth, *lease_ms, now),
                // Gone, moved or no longer ours to see: ask again when needed.
                Err(_) => self.forget(dir, &name),
            }
            if i == 0 {
                mine = answer.map(|(l, _, _)| l);
            }
        }
        mine
    }

    /// The directory `p` names, checking search permission on each directory
    /// passed through (not on the last), as path resolution does.
    pub(super) async fn resolve_dir(&self, c: &Creds, p: &NsPath) -> Res<DirLookup> {
        let mut cur = self.lookup(c, 0, "", 0).await?;
        for (i, name) in p.components().enumerate() {
            if !perm::allows(c, Owner::of_dir(&cur), true, access::X) {
                return Err(Errno::EACCES);
            }
            cur = self.lookup(c, cur.id, name, i as u32 + 1).await?;
        }
        Ok(cur)
    }

    pub(super) async fn place(&self, c: &Creds, p: &NsPath) -> Res<Place> {
        let Some((parent_path, name)) = p.split() else {
            return Ok(Place { server: self.home(ROOT_ID), at: At::Dir(ROOT_ID), parent: None });
        };
        let parent = self.resolve_dir(c, &parent_path).await?;
        if !perm::allows(c, Owner::of_dir(&parent), true, access::X) {
            return Err(Errno::EACCES);
        }
        let at = At::Entry { dir: parent.id, name: name.to_string() };
        Ok(Place { server: self.server_for(parent.id, name), at, parent: Some((parent, name.to_string())) })
    }

    /// `req` to the server of `place`'s partition, following redirects: for
    /// the steps of a transaction after its commit point, which must reach
    /// the name wherever a split moved it.
    pub(super) async fn place_rpc(&self, place: &Place, c: &Creds, req: Request) -> Res<Reply> {
        match &place.parent {
            Some((dir, name)) => self.entry_rpc(dir.id, name, c, req).await,
            None => self.rpc_ix(place.server, c, req).await,
        }
    }

    /// Drops the cached entries along `p`, so a retry asks the servers.
    pub(super) fn forget_path(&self, p: &NsPath) {
        let names: Vec<&str> = p.components().collect();
        self.cache().retain(|(_, name), _| !names.contains(&name.as_str()));
    }

    pub(super) async fn stat_dir(&self, c: &Creds, id: u64) -> Res<Attr> {
        self.send_owed_touch(|| TouchedDir::Id(id)).await;
        let reply = self.rpc_ix(self.home(id), c, Request::Stat { at: At::Dir(id) }).await?;
        self.attr_or_follow(reply).await
    }

    /// The subdirectory `name` of `parent`, if it is one: a file is `ENOTDIR`.
    pub(super) async fn subdir(&self, c: &Creds, parent: &DirLookup, name: &str, p: &NsPath) -> Res<DirLookup> {
        self.lookup(c, parent.id, name, p.components().count() as u32).await
    }

    pub(super) async fn stat_path(&self, c: &Creds, p: &NsPath) -> Res<Attr> {
        self.optimistic(p, || async {
            let place = self.place(c, p).await?;
            let Some((parent, name)) = &place.parent else { return self.stat_dir(c, ROOT_ID).await };
            match self.rpc_ix(place.server, c, Request::Stat { at: place.at.clone() }).await {
                // A directory: its attributes are on its home.
                Err(Errno::EREMOTE) => {
                    let l = self.subdir(c, parent, name, p).await?;
                    self.stat_dir(c, l.id).await
                }
                r => self.attr_or_follow(r?).await,
            }
        })
        .await
    }

    /// `p`'s parent, resolved as root without the cache (`None`: gone).
    pub(super) async fn fresh_parent(&self, p: &NsPath) -> Res<Option<DirLookup>> {
        let Some((pp, _)) = p.split() else { return Ok(None) };
        self.cache().clear();
        unless_absent(self.resolve_dir(&Creds::root(), &pp).await)
    }

    pub(super) async fn fresh_lookup(&self, dir: u64, name: &str) -> Res<DirLookup> {
        self.forget(dir, name);
        self.lookup(&Creds::root(), dir, name, 1).await
    }
}
