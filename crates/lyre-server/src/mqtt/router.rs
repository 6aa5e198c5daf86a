//! Plain topics (those that name no exported table): the subscriptions of every
//! session in a tree by topic level, so a message costs the levels of its topic,
//! not the number of subscriptions; and the retained message of each topic.
//!
//! A message matching several of one session's subscriptions is delivered once,
//! at the highest QoS among them, with every matching subscription identifier
//! (MQTT-3.3.4-2, -3.3.4-3). A shared subscription (`$share/<group>/<filter>`)
//! delivers each message to one member of its group, in turn.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use mqtt5_protocol::QoS;

use parking_lot::RwLock;

use super::message::{Delivery, Message, Origin, min_qos};
use super::session::{Mailbox, Pushed, SubOptions};
use super::topic::{Filter, matches};

/// A delivery to a session that is not connected, to be stored (then the
/// mailbox told, [`Mailbox::stored`]).
pub(crate) struct Parked {
    /// The session's client id.
    pub(crate) client: Arc<str>,
    /// Its mailbox.
    pub(crate) mailbox: Arc<Mailbox>,
    /// The delivery.
    pub(crate) delivery: Delivery,
}

/// A session's subscription at a node of the tree.
struct Subscriber {
    client: Arc<str>,
    mailbox: Arc<Mailbox>,
    options: SubOptions,
    /// The filter (a share group is its name and its filter, MQTT 5 §4.8.2).
    filter: Arc<str>,
}

#[derive(Default)]
struct Node {
    children: HashMap<String, Node>,
    /// Subscriptions whose filter ends here, by client (and share group).
    here: HashMap<(Arc<str>, Option<String>), Subscriber>,
    /// Subscriptions whose filter ends with `#` here.
    rest: HashMap<(Arc<str>, Option<String>), Subscriber>,
}

impl Node {
    fn is_empty(&self) -> bool {
        self.children.is_empty() && self.here.is_empty() && self.rest.is_empty()
    }
}

/// Plain-topic subscriptions and retained messages.
#[derive(Default)]
pub(crate) struct Router {
    tree: RwLock<Node>,
    /// Counts messages sent to share groups: each goes to the member this picks.
    turns: AtomicUsize,
    retained: RwLock<BTreeMap<Arc<str>, Arc<Message>>>,
}

impl Router {
    /// Adds (or replaces) `client`'s subscription to `filter`; true when it
    /// replaced one.
    pub(crate) fn subscribe(
        &self,
        client: &Arc<str>,
        mailbox: &Arc<Mailbox>,
        filter: &Filter,
        options: SubOptions,
    ) -> bool {
        let mut tree = self.tree.write();
        let mut node = &mut *tree;
        let mut levels = filter.filter.split('/').peekable();
        let mut trailing_hash = false;
        while let Some(level) = levels.next() {
            if level == "#" && levels.peek().is_none() {
                trailing_hash = true;
                break;
            }
            node = node.children.entry(level.to_string()).or_default();
        }
        let subscriber = Subscriber {
            client: client.clone(),
            mailbox: mailbox.clone(),
            options,
            filter: Arc::from(filter.filter.as_str()),
        };
        let key = (client.clone(), filter.group.clone());
        let slot = if trailing_hash { &mut node.rest } else { &mut node.here };
        slot.insert(key, subscriber).is_some()
    }

    /// Removes `client`'s subscription to `filter`; true when there was one.
    pub(crate) fn unsubscribe(&self, client: &Arc<str>, filter: &Filter) -> bool {
        let levels: Vec<&str> = filter.filter.split('/').collect();
        let key = (client.clone(), filter.group.clone());
        remove(&mut self.tree.write(), &levels, &key)
    }

    /// Sends `message` to every session subscribed to its topic; answers the
    /// deliveries to sessions that are not connected that are to be stored.
    pub(crate) fn route(&self, message: &Arc<Message>) -> Vec<Parked> {
        let mut parked = Vec::new();
        let mut push = |client: &Arc<str>, mailbox: &Arc<Mailbox>, delivery: Delivery| {
            let copy = delivery.clone();
            if mailbox.push(delivery) == Pushed::Store {
                parked.push(Parked { client: client.clone(), mailbox: mailbox.clone(), delivery: copy });
            }
        };
        let mut matched: Vec<(&Subscriber, Option<&str>)> = Vec::new();
        let tree = self.tree.read();
        let levels: Vec<&str> = message.topic.split('/').collect();
        collect(&tree, &levels, 0, message.topic.starts_with('$'), &mut matched);
        // One delivery per client (highest QoS, every identifier); one member per
        // share group.
        let mut by_client: HashMap<&str, (&Subscriber, QoS, bool, Vec<u32>)> = HashMap::new();
        let mut groups: BTreeMap<(&str, &str), Vec<&Subscriber>> = BTreeMap::new();
        for (subscriber, group) in matched {
            if let Some(group) = group {
                groups.entry((group, &subscriber.filter)).or_default().push(subscriber);
                continue;
            }
            if subscriber.options.no_local && message.publisher.as_deref() == Some(&*subscriber.client) {
                continue;
            }
            let entry =
                by_client.entry(&subscriber.client).or_insert_with(|| (subscriber, QoS::AtMostOnce, false, Vec::new()));
            if subscriber.options.qos as u8 > entry.1 as u8 {
                entry.1 = subscriber.options.qos;
            }
            entry.2 |= subscriber.options.retain_as_published;
            entry.3.extend(subscriber.options.id);
        }
        for (subscriber, qos, rap, ids) in by_client.into_values() {
            push(&subscriber.client, &subscriber.mailbox, delivery(message, qos, rap, ids));
        }
        for (_, mut members) in groups {
            members.sort_by(|a, b| a.client.cmp(&b.client));
            let turn = self.turns.fetch_add(1, Ordering::Relaxed);
            let member = members[turn % members.len()];
            let options = member.options;
            let ids = options.id.into_iter().collect();
            push(&member.client, &member.mailbox, delivery(message, options.qos, options.retain_as_published, ids));
        }
        parked
    }

    /// Keeps `message` as its topic's retained message (an empty payload removes
    /// it, MQTT-3.3.1-10).
    pub(crate) fn retain(&self, message: Arc<Message>) {
        let mut retained = self.retained.write();
        match message.payload.is_empty() {
            true => retained.remove(&message.topic),
            false => retained.insert(message.topic.clone(), message),
        };
    }

    /// The retained messages whose topic `filter` matches, expired ones left out.
    pub(crate) fn retained(&self, filter: &str) -> Vec<Arc<Message>> {
        let now = Instant::now();
        self.retained.read().values().filter(|m| matches(filter, &m.topic) && !m.expired(now)).cloned().collect()
    }
}

fn delivery(message: &Arc<Message>, qos: QoS, retain_as_published: bool, subscription_ids: Vec<u32>) -> Delivery {
    Delivery {
        message: message.clone(),
        qos: min_qos(message.qos, qos),
        retain: retain_as_published && message.retain,
        subscription_ids,
        origin: Origin::Plain,
    }
}

/// Gathers the subscribers of the topic whose levels are `levels[depth..]`.
fn collect<'a>(
    node: &'a Node,
    levels: &[&str],
    depth: usize,
    dollar: bool,
    out: &mut Vec<(&'a Subscriber, Option<&'a str>)>,
) {
    let wildcards = !(dollar && depth == 0);
    if wildcards {
        // `#` matches the parent level too ("sport/#" matches "sport").
        out.extend(node.rest.iter().map(|((_, group), s)| (s, group.as_deref())));
    }
    let Some(level) = levels.get(depth) else {
        out.extend(node.here.iter().map(|((_, group), s)| (s, group.as_deref())));
        return;
    };
    if let Some(child) = node.children.get(*level) {
        collect(child, levels, depth + 1, dollar, out);
    }
    if wildcards && let Some(plus) = node.children.get("+") {
        collect(plus, levels, depth + 1, dollar, out);
    }
}

/// Removes the subscription `key` at `levels` below `node`, pruning empty nodes.
fn remove(node: &mut Node, levels: &[&str], key: &(Arc<str>, Option<String>)) -> bool {
    match levels {
        [] => node.here.remove(key).is_some(),
        ["#"] => node.rest.remove(key).is_some(),
        [first, rest @ ..] => {
            let Some(child) = node.children.get_mut(*first) else { return false };
            let removed = remove(child, rest, key);
            if child.is_empty() {
                node.children.remove(*first);
            }
            removed
        }
    }
}
