//! `Footprint` against what decoding really allocates: a counting allocator measures
//! the peak and the retained heap of decoding documents of several shapes, and the
//! estimate must cover the peak without overstating it wildly (an estimate far above
//! the truth would refuse bodies the server could hold).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use lyre_core::{Footprint, Value};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged and only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
        PEAK.fetch_max(live, Ordering::SeqCst);
        // SAFETY: the caller's contract is passed through.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
        // SAFETY: the caller's contract is passed through.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Measurements share the counters: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// (peak above the start while decoding, retained after) for decoding `decode`.
fn measure(decode: impl FnOnce() -> Value) -> (usize, usize) {
    let start = LIVE.load(Ordering::SeqCst);
    PEAK.store(start, Ordering::SeqCst);
    let value = decode();
    let retained = LIVE.load(Ordering::SeqCst) - start;
    let peak = PEAK.load(Ordering::SeqCst) - start;
    drop(value);
    (peak, retained)
}

fn check(shape: &str, document: impl FnOnce() -> String) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let json = &document();
    let Footprint(estimate) = serde_json::from_str(json).unwrap();
    // The root slot is not on the heap; the estimate counts it.
    let estimate_heap = estimate - std::mem::size_of::<Value>();
    let (peak, retained) = measure(|| serde_json::from_str::<Value>(json).unwrap());
    assert!(estimate_heap >= peak, "{shape}: estimated {estimate_heap} bytes, decoding peaked at {peak}");
    assert!(
        estimate_heap <= 3 * retained.max(1) + 64,
        "{shape}: estimated {estimate_heap} bytes for {retained} retained (more than 3 times)"
    );
    // Measured after decoding (a small body's one pass), the value gives the same figure.
    let value: Value = serde_json::from_str(json).unwrap();
    assert_eq!(Footprint::of(&value), Footprint(estimate), "{shape}: measured after decoding");

    let msgpack = rmp_serde::to_vec(&serde_json::from_str::<Value>(json).unwrap()).unwrap();
    let Footprint(from_msgpack) = rmp_serde::from_slice(&msgpack).unwrap();
    let (peak, _) = measure(|| rmp_serde::from_slice::<Value>(&msgpack).unwrap());
    assert!(
        from_msgpack - std::mem::size_of::<Value>() >= peak,
        "{shape} as MessagePack: estimated {from_msgpack}, peak {peak}"
    );
}

fn records(n: usize, record: impl Fn(usize) -> String) -> String {
    let items: Vec<String> = (0..n).map(record).collect();
    format!(r#"{{"operation":"insert","table":"t","records":[{}]}}"#, items.join(","))
}

#[test]
fn tiny_records() {
    check("tiny records", || records(20_000, |i| format!(r#"{{"id":{i}}}"#)));
}

#[test]
fn wide_records() {
    check("wide records", || {
        records(2_000, |i| {
            let fields: Vec<String> = (0..10).map(|f| format!(r#""f{f}":"{}""#, "x".repeat(50))).collect();
            format!(r#"{{"id":{i},{}}}"#, fields.join(","))
        })
    });
}

#[test]
fn arrays_of_numbers() {
    check("arrays of numbers", || records(2_000, |i| format!(r#"{{"id":{i},"v":[1,2,3,4,5,6,7,8,9]}}"#)));
}

#[test]
fn many_keys_and_long_strings() {
    check("many keys", || {
        let keys: Vec<String> = (0..300).map(|k| format!(r#""key{k}":"{}""#, "y".repeat(k))).collect();
        format!("{{{}}}", keys.join(","))
    });
}

#[test]
fn deep_nesting() {
    // serde_json refuses documents nested more than 128 levels.
    let depth = 60;
    check("deep nesting", || format!("{}1{}", r#"{"a":["#.repeat(depth), "]}".repeat(depth)));
}

/// The densest JSON for its decoded size, shape by shape: a digit and a comma per
/// array element is the worst (a 64-byte slot, rounded up, and twice that again
/// while the array grows: 108 bytes of estimate per byte of text).
#[test]
fn a_json_body_decodes_to_at_most_its_bound_per_byte() {
    // Its allocations would count in another test's measurement.
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let repeat = |item: &str| format!("[{}]", vec![item; 5000].join(","));
    let shapes = [
        ("digits", repeat("0")),
        ("one digit", "[0]".to_string()),
        ("nested arrays", format!("{}0{}", "[".repeat(100), "]".repeat(100))),
        ("empty arrays", repeat("[]")),
        ("empty objects", repeat("{}")),
        ("empty strings", repeat(r#""""#)),
        ("one-entry objects", repeat(r#"{"a":0}"#)),
        ("distinct keys", format!("{{{}}}", (0..5000).map(|k| format!(r#""{k}":0"#)).collect::<Vec<_>>().join(","))),
        ("a scalar", "7".to_string()),
    ];
    for (shape, json) in shapes {
        let Footprint(estimate) = serde_json::from_str(&json).unwrap();
        let heap = estimate - std::mem::size_of::<Value>();
        assert!(
            heap <= Footprint::MOST_PER_JSON_BYTE * json.len(),
            "{shape}: {heap} bytes of estimate for {} bytes of JSON",
            json.len()
        );
    }
}
