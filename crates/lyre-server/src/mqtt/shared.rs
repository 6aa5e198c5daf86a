//! Shared subscriptions (`$share/<group>/<filter>`) whose filter matches record
//! topics: one set of change feeds per group and filter, whatever the number of
//! members, each change given to one member in turn (plain topics' shared
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
use super::router::SubOptions;
use super::session::{Mailbox, Pushed};
use crate::http::error::ApiError;

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

/// Every group with record feeds, by share name and filter.
#[derive(Default)]
pub(crate) struct SharedRecords {
    groups: Mutex<HashMap<(String, String), Arc<Group>>>,
}

impl SharedRecords {
    /// Adds `client` to the group of `group` and `filter`, whose feeds `plans`
    /// describe (as `ctx`'s user, who must be able to read them): the first
    /// member opens them.
    pub(crate) async fn join(
        &self,
        broker: &Arc<Broker>,
        ctx: &Context,
        key: (String, String),
        plans: Vec<FeedPlan>,
        member: (Arc<str>, Arc<Mailbox>, SubOptions),
    ) -> Result<(), ApiError> {
        let (client, mailbox, options) = member;
        let existing = self.groups.lock().get(&key).cloned();
        let group = match existing {
            Some(group) => {
                // The member's own permissions, as if it opened the feeds itself.
                for plan in &plans {
                    let table = broker.state.engine.database(&plan.request.database)?;
                    let table = table.table(plan.request.table.as_deref().unwrap_or_default())?;
                    table.access(ctx, &[lyre_core::access::Action::Read])?;
                }
                group
            }
            None => {
                let group = Arc::new(Group {
                    members: Mutex::new(Vec::new()),
                    turn: AtomicUsize::new(0),
                    feeds: Mutex::new(Vec::new()),
                });
                let mut feeds = Vec::new();
                for mut plan in plans {
                    plan.request.omit_current = true; // no retained messages for shared subscriptions
                    let subscription = broker.state.services.feed().subscribe(ctx, plan.request).await?;
                    let task = distribute(subscription, plan.names, Arc::downgrade(&group), Arc::downgrade(broker));
                    feeds.push(tokio::spawn(task));
                }
                *group.feeds.lock() = feeds;
                self.groups.lock().entry(key).or_insert(group).clone()
            }
        };
        let mut members = group.members.lock();
        members.retain(|m| m.client != client);
        members.push(Member { client, mailbox, options });
        Ok(())
    }

    /// Takes `client` out of the group of `key`; the last member out closes its
    /// feeds.
    pub(crate) fn leave(&self, key: &(String, String), client: &str) {
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
}

/// Gives each change of `subscription` to one member of `group`, in turn; one
/// queued for a session away is stored as the router's are.
async fn distribute(
    mut subscription: Subscription,
    names: Arc<HashMap<String, String>>,
    group: Weak<Group>,
    broker: Weak<Broker>,
) {
    let everything =
        SubOptions { qos: mqtt5_protocol::QoS::ExactlyOnce, no_local: false, retain_as_published: false, id: None };
    while let Ok(event) = subscription.next().await {
        let Some(change) = records::delivery(&event, &names, everything, 0) else { continue };
        let (Some(group), Some(broker)) = (group.upgrade(), broker.upgrade()) else { return };
        let chosen = {
            let members = group.members.lock();
            if members.is_empty() {
                continue;
            }
            let member = &members[group.turn.fetch_add(1, Ordering::Relaxed) % members.len()];
            let delivery = Delivery {
                qos: min_qos(change.qos, member.options.qos),
                retain: false,
                subscription_ids: member.options.id.into_iter().collect(),
                message: change.message.clone(),
                origin: Origin::Plain,
            };
            let copy = delivery.clone();
            (member.mailbox.push(delivery), member.client.clone(), copy)
        };
        if let (Pushed::Parked, client, delivery) = chosen
            && delivery.qos != mqtt5_protocol::QoS::AtMostOnce
            && let Err(err) = broker.keep_queued(&[(client, delivery)]).await
        {
            tracing::warn!(error = %err, "a shared subscription's message for a session away could not be stored");
        }
    }
}
