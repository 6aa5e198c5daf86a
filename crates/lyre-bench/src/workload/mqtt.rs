//! MQTT delivery: fan-out (one publisher, many subscribers of one topic), fan-in
//! (many publishers, one subscriber), and the memory an idle connection costs.
//!
//! Every client is `rumqttc` (MQTT 3.1.1). Subscribers subscribe at `qos`; the
//! publishers then publish `messages` each at `qos`, each payload a small JSON
//! object carrying its send time, so every subscriber records the end-to-end
//! latency of each delivery. A round ends when every subscriber has every message,
//! or when one has waited [`IDLE_LIMIT`] for its next (what is missing counts as
//! errors). Deliveries per second are messages received over the round's wall
//! time; the server's CPU is per delivery.
//!
//! The topic is `usertable/<id>` by default: a record of the YCSB application for
//! Lyre and Harper (a publish without retain is a message to the record), any
//! topic for a bare broker (mosquitto). `--topic` names another (a plain topic on
//! Lyre).

use std::time::{Duration, Instant};

use anyhow::Context as _;
use rumqttc::{AsyncClient, Event, EventLoop, MqttOptions, Packet, QoS};

use crate::stats::{Measurement, ServerUse, gather_receivers, histogram};
use crate::target::{ProcessSample, Target};

/// How long a subscriber waits for its next message before the round gives up on it.
const IDLE_LIMIT: Duration = Duration::from_secs(20);

/// Which traffic a round makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum Pattern {
    /// One publisher, `clients` subscribers.
    FanOut,
    /// `clients` publishers, one subscriber.
    FanIn,
    /// `clients` connections that only connect: the server's memory per connection.
    Idle,
}

/// Parameters of an MQTT run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MqttParams {
    /// The traffic.
    pub pattern: Pattern,
    /// QoS of publishes and subscriptions (0 or 1).
    pub qos: u8,
    /// Subscribers (fan-out), publishers (fan-in) or connections (idle).
    pub clients: usize,
    /// Messages per publisher.
    pub messages: u64,
    /// The topic; `None` for `usertable/mqtt-<round>`.
    pub topic: Option<String>,
}

fn qos(level: u8) -> QoS {
    match level {
        0 => QoS::AtMostOnce,
        1 => QoS::AtLeastOnce,
        _ => QoS::ExactlyOnce,
    }
}

/// A connected client and its event loop, polled on its own task from here on
/// (`on_publish` sees each message received).
async fn connect(target: &Target, id: String, capacity: usize) -> anyhow::Result<(AsyncClient, EventLoop)> {
    let (host, port) = target.mqtt.clone().context("the target has no MQTT address (--mqtt)")?;
    let mut options = MqttOptions::new(id, host, port);
    options.set_credentials(target.user.clone(), target.password.clone());
    options.set_keep_alive(Duration::from_secs(60));
    options.set_max_packet_size(1 << 20, 1 << 20);
    options.set_inflight(100);
    let (client, mut events) = AsyncClient::new(options, capacity);
    // Up to CONNACK.
    let deadline = Instant::now() + IDLE_LIMIT;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(remaining, events.poll()).await {
            Ok(Ok(Event::Incoming(Packet::ConnAck(_)))) => return Ok((client, events)),
            Ok(Ok(_)) => continue,
            Ok(Err(err)) => anyhow::bail!("connecting to {}: {err}", target.name),
            Err(_) => anyhow::bail!("no CONNACK from {} within {IDLE_LIMIT:?}", target.name),
        }
    }
}

/// Subscribes and waits for the SUBACK.
async fn subscribe(client: &AsyncClient, events: &mut EventLoop, topic: &str, level: u8) -> anyhow::Result<()> {
    client.subscribe(topic, qos(level)).await?;
    loop {
        match tokio::time::timeout(IDLE_LIMIT, events.poll()).await {
            Ok(Ok(Event::Incoming(Packet::SubAck(ack)))) => {
                let refused = ack.return_codes.iter().any(|c| matches!(c, rumqttc::SubscribeReasonCode::Failure));
                anyhow::ensure!(!refused, "the subscription to {topic} was refused");
                return Ok(());
            }
            Ok(Ok(_)) => continue,
            Ok(Err(err)) => anyhow::bail!("subscribing: {err}"),
            Err(_) => anyhow::bail!("no SUBACK within {IDLE_LIMIT:?}"),
        }
    }
}

/// Receives until `expected` timed messages have arrived or the feed goes quiet;
/// answers the latencies and the count.
async fn receive(mut events: EventLoop, expected: u64, epoch: Instant) -> (hdrhistogram::Histogram<u64>, u64) {
    let (mut latencies, mut received) = (histogram(), 0u64);
    while received < expected {
        let Ok(Ok(event)) = tokio::time::timeout(IDLE_LIMIT, events.poll()).await else { break };
        if let Event::Incoming(Packet::Publish(publish)) = event {
            let sent = serde_json::from_slice::<serde_json::Value>(&publish.payload).ok().and_then(|v| v["t"].as_u64());
            if let Some(sent) = sent {
                let now = epoch.elapsed().as_micros() as u64;
                let _ = latencies.record(now.saturating_sub(sent).clamp(1, 100_000_000));
                received += 1;
            }
        }
    }
    (latencies, received)
}

/// Publishes `messages` timed messages, keeping its event loop turning; answers
/// how many could not be queued.
async fn publish(
    client: AsyncClient,
    mut events: EventLoop,
    topic: String,
    level: u8,
    messages: u64,
    epoch: Instant,
) -> u64 {
    // The event loop sends what is queued and takes the acknowledgements.
    let driver = tokio::spawn(async move { while events.poll().await.is_ok() {} });
    let mut failed = 0;
    for i in 0..messages {
        let sent = epoch.elapsed().as_micros() as u64;
        let payload = format!(r#"{{"i":{i},"t":{sent}}}"#);
        if client.publish(topic.as_str(), qos(level), false, payload).await.is_err() {
            failed += 1;
        }
    }
    // Long enough for the last acknowledgements; the subscribers decide the round.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = client.disconnect().await;
    let _ = tokio::time::timeout(Duration::from_secs(10), driver).await;
    failed
}

/// One round against one server.
pub async fn run(target: &Target, params: &MqttParams, round: usize) -> anyhow::Result<Measurement> {
    if params.pattern == Pattern::Idle {
        return idle(target, params, round).await;
    }
    let topic = params.topic.clone().unwrap_or_else(|| format!("usertable/mqtt-{round}"));
    let (subscribers, publishers) = match params.pattern {
        Pattern::FanOut => (params.clients, 1),
        _ => (1, params.clients),
    };
    let expected_each = params.messages * publishers as u64;
    let epoch = Instant::now();
    let mut receivers = Vec::with_capacity(subscribers);
    for i in 0..subscribers {
        let (client, mut events) = connect(target, format!("bench-sub-{round}-{i}"), 10).await?;
        subscribe(&client, &mut events, &topic, params.qos).await?;
        receivers.push((client, events));
    }
    let mut senders = Vec::with_capacity(publishers);
    for i in 0..publishers {
        senders.push(connect(target, format!("bench-pub-{round}-{i}"), 1_000).await?);
    }
    let before = target.sample_tree();
    let load_before = ProcessSample::of_self();
    let started = Instant::now();
    let readers: Vec<_> = receivers
        .into_iter()
        .map(|(client, events)| {
            tokio::spawn(async move {
                let result = receive(events, expected_each, epoch).await;
                drop(client);
                result
            })
        })
        .collect();
    let writers: Vec<_> = senders
        .into_iter()
        .map(|(client, events)| {
            tokio::spawn(publish(client, events, topic.clone(), params.qos, params.messages, epoch))
        })
        .collect();
    let mut failed = 0;
    for writer in writers {
        failed += writer.await?;
    }
    let (latencies, delivered) = gather_receivers(readers).await?;
    let elapsed = started.elapsed();
    let expected = expected_each * subscribers as u64;
    if failed > 0 || delivered < expected {
        eprintln!("{}: {failed} publishes failed; {delivered} of {expected} deliveries arrived", target.name);
    }
    let server = before.zip(target.sample_tree()).map(|(b, a)| ServerUse::between(b, a, delivered));
    let name = format!("mqtt-{}-qos{}", if params.pattern == Pattern::FanOut { "fanout" } else { "fanin" }, params.qos);
    Ok(Measurement::new(
        &name,
        &target.name,
        round,
        delivered,
        delivered,
        expected - delivered.min(expected),
        elapsed,
        &latencies,
        server,
    )
    .with_load_cpu(load_before, ProcessSample::of_self()))
}

/// Opens `clients` connections and holds them: prints how much the server's
/// resident memory grew per connection (the measurement counts connections opened
/// per second, and their connect latency).
async fn idle(target: &Target, params: &MqttParams, round: usize) -> anyhow::Result<Measurement> {
    let before = target.sample_tree().context("the idle pattern needs the server's --pid")?;
    let started = Instant::now();
    let mut held = Vec::with_capacity(params.clients);
    let mut latencies = histogram();
    for chunk in (0..params.clients).collect::<Vec<_>>().chunks(250) {
        let connecting = chunk.iter().map(|i| {
            let opened = Instant::now();
            async move {
                let (client, events) = connect(target, format!("bench-idle-{round}-{i}"), 1).await?;
                Ok::<_, anyhow::Error>((client, events, opened.elapsed()))
            }
        });
        for result in futures_util::future::join_all(connecting).await {
            let (client, events, took) = result?;
            let _ = latencies.record((took.as_micros() as u64).max(1));
            held.push((client, events));
        }
    }
    let elapsed = started.elapsed();
    // Let the server settle its buffers, then read its memory with all held.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = target.sample_tree().context("sampling the server")?;
    let per_connection = (after.rss_kib.saturating_sub(before.rss_kib)) as f64 * 1024.0 / params.clients.max(1) as f64;
    println!(
        "{}: {} idle MQTT connections: resident memory {} -> {} KiB, {:.0} bytes per connection",
        target.name, params.clients, before.rss_kib, after.rss_kib, per_connection
    );
    drop(held);
    let server = Some(ServerUse::between(before, after, params.clients as u64));
    Ok(Measurement::new(
        "mqtt-idle",
        &target.name,
        round,
        params.clients as u64,
        params.clients as u64,
        0,
        elapsed,
        &latencies,
        server,
    ))
}
