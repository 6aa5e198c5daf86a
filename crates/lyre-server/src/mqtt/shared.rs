//! Shared subscriptions (`$share/<group>/<filter>`) whose filter matches record
//! topics: one set of change feeds per share name, filter and user (the feeds
//! read as that user, so every member sees what it may read), each change given
//! to one member in turn, a connected one before one away (plain topics' shared
//! subscriptions are the router's).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Weak;
use std::sync::atomic::{AtomicUsize, Ordering};

use lyre_core::Context;
use lyre_core::services::Subscription;
use parking_lot::Mutex;
use tokio::task::JoinHandle;

use super::Broker;
use super::message::{Delivery, Origin, min_qos};
use super::records::{self, FeedPlan};
use super::router::Parked;
use super::session::{Mailbox, Pushed, SubOptions};
use crate::http::error::ApiError;

/// A group: its share name, its filter, the user its members log in as.
pub(crate) type GroupKey = (String, String, String);

/// One member of a group.
struct Member {
    client: Arc<str>,
    mailbox: Arc<Mailbox>,
    options: SubOptions,
}

/// A group's feeds and members.
struct Group {
    members: Mutex<Vec<Member>>,
    turn: AtomicUsize,
    feeds: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Group {
    fn drop(&mut self) {
        for feed in self.feeds.get_mut().drain(..) {
            feed.abort();
        }
    }
}

/// Every group with record feeds.
#[derive(Default)]
pub(crate) struct SharedRecords {
    groups: Mutex<HashMap<GroupKey, Arc<Group>>>,
}

impl SharedRecords {
    /// Adds a member (client, mailbox, options) to the group `key`, whose feeds
    /// `plans` describe: the first member opens them, as `ctx`'s user.
    pub(crate) async fn join(
        &self,
        broker: &Arc<Broker>,
        ctx: &Context,
        key: GroupKey,
        plans: Vec<FeedPlan>,
        member: (Arc<str>, Arc<Mailbox>, SubOptions),
    ) -> Result<(), ApiError> {
        let (client, mailbox, options) = member;
        let created = {
            let mut groups = self.groups.lock();
            let group = groups.entry(key.clone()).or_insert_with(|| {
                Arc::new(Group {
                    members: Mutex::new(Vec::new()),
                    turn: AtomicUsize::new(0),
                    feeds: Mutex::new(Vec::new()),
                })
            });
            // Joined under the map's lock: a member leaving meanwhile cannot drop
            // the group from under it.
            let mut members = group.members.lock();
            members.retain(|m| m.client != client);
            members.push(Member { client: client.clone(), mailbox, options });
            let created = members.len() == 1 && group.feeds.lock().is_empty();
            drop(members);
            created.then(|| group.clone())
        };
        let Some(group) = created else { return Ok(()) };
        let mut feeds = Vec::new();
        for mut plan in plans {
            plan.request.omit_current = true; // no retained messages for shared subscriptions
            match broker.state.services.feed().subscribe(ctx, plan.request).await {
                Ok(subscription) => {
                    let task = distribute(
                        subscription,
                        plan.names,
                        key.clone(),
                        Arc::downgrade(&group),
                        Arc::downgrade(broker),
                    );
                    feeds.push(tokio::spawn(task));
                }
                Err(err) => {
                    self.close(&key, &group);
                    return Err(err.into());
                }
            }
        }
        *group.feeds.lock() = feeds;
        Ok(())
    }

    /// Takes `client` out of the group `key`; the last member out closes its
    /// feeds.
    pub(crate) fn leave(&self, key: &GroupKey, client: &str) {
        let mut groups = self.groups.lock();
        let Some(group) = groups.get(key) else { return };
        let empty = {
            let mut members = group.members.lock();
            members.retain(|m| &*m.client != client);
            members.is_empty()
        };
        if empty {
            groups.remove(key);
        }
    }

    /// Removes `group` (if it is still the one at `key`): its feeds failed, so
    /// the next member to subscribe opens them again.
    fn close(&self, key: &GroupKey, group: &Arc<Group>) {
        let mut groups = self.groups.lock();
        if groups.get(key).is_some_and(|g| Arc::ptr_eq(g, group)) {
            groups.remove(key);
        }
    }
}

/// Gives each change of `subscription` to one member of the group, in turn (one
/// connected before one away, one with room before one whose mailbox is full).
async fn distribute(
    mut subscription: Subscription,
    names: Arc<HashMap<String, String>>,
    key: GroupKey,
    group: Weak<Group>,
    broker: Weak<Broker>,
) {
    let everything =
        SubOptions { qos: mqtt5_protocol::QoS::ExactlyOnce, no_local: false, retain_as_published: false, id: None };
    loop {
        let event = match subscription.next().await {
            Ok(event) => event,
            Err(end) => {
                tracing::warn!(group = %key.0, filter = %key.1, reason = %end, "a shared subscription's feed ended");
                if let (Some(group), Some(broker)) = (group.upgrade(), broker.upgrade()) {
                    broker.shared.close(&key, &group);
                }
                return;
            }
        };
        let Some(change) = records::delivery(&event, &names, everything, 0) else { continue };
        let (Some(group), Some(broker)) = (group.upgrade(), broker.upgrade()) else { return };
        let parked = give(&group, &change);
        if let Err(err) = broker.store_parked(parked).await {
            tracing::warn!(error = %err, "a shared subscription's message for a session away could not be stored");
        }
    }
}

/// Pushes `change` to the member whose turn it is, preferring connected members
/// and those with room; answers it when it is to be stored.
fn give(group: &Group, change: &Delivery) -> Vec<Parked> {
    let members = group.members.lock();
    if members.is_empty() {
        return Vec::new();
    }
    let start = group.turn.fetch_add(1, Ordering::Relaxed);
    let in_turn = (0..members.len()).map(|i| &members[(start + i) % members.len()]);
    let ordered: Vec<&Member> =
        in_turn.clone().filter(|m| !m.mailbox.is_parked()).chain(in_turn.filter(|m| m.mailbox.is_parked())).collect();
    for member in ordered {
        let delivery = Delivery {
            qos: min_qos(change.qos, member.options.qos),
            retain: false,
            subscription_ids: member.options.id.into_iter().collect(),
            message: change.message.clone(),
            origin: Origin::Plain,
        };
        match member.mailbox.push(delivery.clone()) {
            Pushed::Queued => return Vec::new(),
            Pushed::Store => {
                return vec![Parked { client: member.client.clone(), mailbox: member.mailbox.clone(), delivery }];
            }
            Pushed::Dropped => continue,
        }
    }
    Vec::new()
}
