//! Telling a consumed record without headers from one with, without
//! librdkafka's header parse.
//!
//! Why: librdkafka keeps a consumed record's header bytes unparsed and
//! parses them on `rd_kafka_message_headers`, which makes and frees a
//! shadow buffer (a calloc, a mutex made and destroyed) before it reads the
//! count, even when that count is 0: about a tenth of a judging thread's
//! CPU. Its API has no cheaper way to ask.
//!
//! How: the message librdkafka hands out is the head of its own record
//! (`rd_kafka_msg_t`, `rdkafka_msg.h`), whose consumer part keeps a
//! pointer to and the length of those unparsed bytes (`binhdrs`): in the
//! record format (v2) they follow the value, and begin with the header
//! count as a zigzag varint, a single 0 byte for none. This reads the two
//! fields at their place in the librdkafka this crate is built with, and
//! answers "none" only when the layout is that release's and the pointer
//! is where the record format puts it (right after the value); any other
//! case (another librdkafka, a null value, an older message format, a
//! record with headers) goes to librdkafka's own parse.

use std::sync::OnceLock;

use rdkafka::bindings as rd;

/// The librdkafka release whose `rd_kafka_msg_t` the offsets below are
/// read from (`RD_KAFKA_VERSION` in the bundled `rdkafka.h`).
const KNOWN_RELEASE: i32 = 0x020c_01ff;

/// Where `rkm_u.consumer.binhdrs` lies in that release's `rd_kafka_msg_t`
/// on a 64-bit target: after the public message (72 bytes), its queue
/// link (two pointers), flags and timestamp type (two ints), timestamp,
/// parsed-headers pointer, status and broker id (two ints): `len` (an
/// `i32`) at 120, `data` (a pointer) at 128.
const BINHDRS_LEN_AT: usize = 120;
const BINHDRS_DATA_AT: usize = 128;

/// Whether the fast answer is on: this process's librdkafka is the release
/// the offsets are for (false after an upgrade: the test that checks it
/// then says the offsets need reading again).
pub fn in_use() -> bool {
    static KNOWN: OnceLock<bool> = OnceLock::new();
    *KNOWN.get_or_init(|| {
        // SAFETY: a pure function of the linked library.
        let release = unsafe { rd::rd_kafka_version() };
        cfg!(target_pointer_width = "64")
            && std::mem::size_of::<rd::rd_kafka_message_t>() == 72
            && release == KNOWN_RELEASE
    })
}

/// True when `msg`, a record librdkafka consumed (no error), certainly has
/// no headers; false when it may have some (then ask librdkafka).
///
/// # Safety
///
/// `msg` is a message librdkafka handed out (and has not freed): the
/// fields read lie past the public struct, in librdkafka's own record.
pub unsafe fn surely_none(msg: &rd::rd_kafka_message_t) -> bool {
    if msg.err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || msg.payload.is_null() || !in_use() {
        return false;
    }
    let base = (msg as *const rd::rd_kafka_message_t).cast::<u8>();
    // SAFETY: every message librdkafka hands out (the caller's promise) is
    // the head of an `rd_kafka_msg_t` (`rd_kafka_message_get`: a fetch op's
    // or an error op's), which `in_use` says reaches past both fields; the
    // reads are unaligned-tolerant and only read.
    let (len, data) = unsafe {
        (
            base.add(BINHDRS_LEN_AT).cast::<i32>().read_unaligned(),
            base.add(BINHDRS_DATA_AT).cast::<*const u8>().read_unaligned(),
        )
    };
    let value_end = msg.payload.cast::<u8>().wrapping_add(msg.len);
    // SAFETY: `data` is the value's end, inside the fetched buffer, and
    // `len` ≥ 1 bytes of header section follow it there.
    len >= 1 && std::ptr::eq(data, value_end) && unsafe { *data } == 0
}
