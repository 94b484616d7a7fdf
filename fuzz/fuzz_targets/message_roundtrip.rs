//! Decode arbitrary bytes within a limit; whatever decodes must re-encode and decode equal.
#![no_main]

use libfuzzer_sys::fuzz_target;
use skein::Message;

/// Small enough that the fuzzer explores the over-limit paths too.
const LIMIT: usize = 64 * 1024;

fuzz_target!(|data: &[u8]| {
    if let Ok(message) = Message::decode(data, LIMIT) {
        let bytes = message.to_bytes();
        let again = Message::decode(&bytes, LIMIT).expect("re-encoded message must decode");
        assert_eq!(again, message);
        assert!(message.queue_weight() <= LIMIT);
    }
});
