//! What the stores on a network server share: a subscription to release notices that is
//! renewed whenever it is lost (PostgreSQL, etcd, Redis: ZooKeeper watches names one by one
//! instead); and, for the stores of an address with several members and of values they
//! encode themselves (etcd, Redis, ZooKeeper), reading those members and the owners in those
//! values. (Their deadline on every call is [`crate::deadline::Deadline`].)

#[cfg(feature = "postgres")]
pub(crate) use subscription::AbortOnDrop;
#[cfg(any(feature = "postgres", feature = "etcd", feature = "redis"))]
pub(crate) use subscription::{Subscription, keep_subscribed};

#[cfg(any(feature = "etcd", feature = "redis", feature = "zookeeper"))]
use fencelock_core::store::Result;
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
use fencelock_core::{Owner, Principal};

#[cfg(any(feature = "postgres", feature = "etcd", feature = "redis"))]
mod subscription {
    use std::time::Duration;

    use fencelock_core::ReleaseFeed;
    use fencelock_core::store::Result;
    use tokio::task::JoinHandle;

    /// The shortest and the longest pause before subscribing again.
    const FIRST_BACKOFF: Duration = Duration::from_millis(50);
    const MAX_BACKOFF: Duration = Duration::from_secs(2);

    /// Runs the subscription `first` (a future that feeds release notices until its connection
    /// is lost), then, each time it ends, opens a new one with `open`, pausing a little longer
    /// after each failure, and tells `feed` that notices may have been missed in between (so
    /// waiters ask again at once instead of waiting for their holder's expiry). Spawned on the
    /// current runtime; stops when the [`Subscription`] is dropped.
    ///
    /// The caller opens `first` itself, so that the store is only made once notices flow, and a
    /// store that cannot subscribe at all fails to open.
    pub(crate) fn keep_subscribed<S, O, F>(
        what: &'static str,
        first: S,
        mut open: O,
        feed: ReleaseFeed,
    ) -> Subscription
    where
        S: Future<Output = ()> + Send + 'static,
        O: FnMut() -> F + Send + 'static,
        F: Future<Output = Result<S>> + Send,
    {
        let task = AbortOnDrop(tokio::spawn({
            let feed = feed.clone();
            async move {
                let mut session = first;
                loop {
                    session.await;
                    let mut backoff = FIRST_BACKOFF;
                    session = loop {
                        tokio::time::sleep(backoff).await;
                        match open().await {
                            Ok(next) => {
                                feed.missed();
                                break next;
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "{what}: subscribing to releases failed; retrying");
                                backoff = (backoff * 2).min(MAX_BACKOFF);
                            }
                        }
                    };
                }
            }
        }));
        Subscription { _task: task }
    }

    /// A subscription to release notices kept alive in the background, feeding the store's
    /// [`ReleaseFeed`]. Dropping it stops the subscription.
    #[derive(Debug)]
    pub(crate) struct Subscription {
        _task: AbortOnDrop,
    }

    /// Aborts a task when dropped, so that neither an early return nor a dropped store leaves
    /// it running.
    #[derive(Debug)]
    pub(crate) struct AbortOnDrop(pub(crate) JoinHandle<()>);

    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
}

/// The members of `SCHEME://host:port[,host:port…]`, each `host:port`, for the store whose
/// scheme is `scheme` (lower case; the address's may be of any case); or why not.
#[cfg(any(feature = "etcd", feature = "redis", feature = "zookeeper"))]
pub(crate) fn members<'a>(url: &'a str, scheme: &str) -> Result<Vec<&'a str>, String> {
    let (given, members) = url
        .split_once("://")
        .ok_or_else(|| format!("expected {scheme}://host:port[,host:port...]"))?;
    if !given.eq_ignore_ascii_case(scheme) {
        return Err(format!("the scheme must be {scheme}://"));
    }
    members
        .split(',')
        .map(|member| {
            let (host, port) = member
                .rsplit_once(':')
                .ok_or_else(|| format!("member {member:?} has no port"))?;
            if host.is_empty() || host.contains('/') {
                return Err(format!("member {member:?} has no host"));
            }
            port.parse::<u16>()
                .map_err(|_| format!("member {member:?} has no valid port"))?;
            Ok(member)
        })
        .collect()
}

/// What a stored value keeps of `owner`'s principal (none: absent).
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
pub(crate) fn principal_of(owner: &Owner) -> Option<String> {
    owner.principal().map(|p| p.as_str().to_owned())
}

/// The owner `name` of `principal`, as a stored value keeps them (no principal: none).
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
pub(crate) fn owner(name: &str, principal: Option<&str>) -> Result<Owner, String> {
    let principal = principal
        .map(|p| Principal::new(p).map_err(|e| format!("principal {p:?}: {e}")))
        .transpose()?;
    Ok(Owner::new(name)
        .map_err(|e| format!("owner {name:?}: {e}"))?
        .of(principal))
}
