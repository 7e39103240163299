//! librdkafka topic handles of the topics a producer writes, made once
//! ([`TopicHandles`]), and a send through one ([`send_to`]).
//!
//! rust-rdkafka's `send` names a record's topic: per record it copies the
//! name into a C string, and librdkafka looks the topic up by name under
//! its lock, keeps it and lets it go again. On the per-record path that is
//! an allocation and a lock the record does not need when the topic is
//! known before the first record: the outputs, the dead letters, the slice
//! log.

use std::ffi::{CString, c_void};
use std::ptr::{self, NonNull};

use rdkafka::bindings as rd;
use rdkafka::error::KafkaError;
use rdkafka::message::{OwnedHeaders, ToBytes};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};

/// One handle per topic, in the order of the names given. Dropped before
/// the client they were made of (librdkafka's topic handles must not
/// outlive it): [`crate::kafka::producer::OutputProducer`] holds them in a
/// field before its producer.
pub struct TopicHandles(Vec<NonNull<rd::rd_kafka_topic_t>>);

// SAFETY: librdkafka's topic handles are thread-safe (its API may be called
// from any thread); these are only passed to librdkafka.
unsafe impl Send for TopicHandles {}
unsafe impl Sync for TopicHandles {}

impl TopicHandles {
    /// Handles of `topics` made of `producer`'s client; none at all when
    /// librdkafka refuses a name (one with a NUL byte cannot be written
    /// anyway): records are then sent by name.
    pub fn new<C: ProducerContext>(producer: &BaseProducer<C>, topics: &[String]) -> Self {
        let rk = producer.client().native_ptr();
        let handles = topics
            .iter()
            .filter_map(|topic| {
                let name = CString::new(topic.as_str()).ok()?;
                // SAFETY: `rk` is the live client; a null configuration takes the defaults.
                NonNull::new(unsafe { rd::rd_kafka_topic_new(rk, name.as_ptr(), ptr::null_mut()) })
            })
            .collect::<Vec<_>>();
        match handles.len() == topics.len() {
            true => TopicHandles(handles),
            // Positions must match the names: with one missing, none is used.
            false => {
                drop(TopicHandles(handles));
                TopicHandles(Vec::new())
            }
        }
    }

    /// The handles' addresses, in the order of the names given: librdkafka
    /// reports a record sent through one with its address.
    pub fn addresses(&self) -> Vec<usize> {
        self.0.iter().map(|h| h.as_ptr() as usize).collect()
    }

    /// The handle of the `i`th topic given.
    pub fn get(&self, i: usize) -> Option<NonNull<rd::rd_kafka_topic_t>> {
        self.0.get(i).copied()
    }
}

impl Drop for TopicHandles {
    fn drop(&mut self) {
        for handle in self.0.drain(..) {
            // SAFETY: made by `rd_kafka_topic_new`, released once; librdkafka
            // keeps its own reference for records still queued.
            unsafe { rd::rd_kafka_topic_destroy(handle.as_ptr()) };
        }
    }
}

/// Sends `record` through `handle` (its topic's, of `producer`'s client)
/// as rust-rdkafka's `send` does by name: librdkafka copies key and
/// payload, partitions as for the name, and takes the headers on success;
/// on a failure the record comes back with its headers.
///
/// The delivery opaque is `()` (null), which rust-rdkafka's delivery
/// handler reads back as `()`.
// The record comes back whole on a failure, to be sent again once the
// queue has room, as from rust-rdkafka's `send`.
#[allow(clippy::result_large_err)]
pub fn send_to<'a, C, K, P>(
    producer: &BaseProducer<C>,
    handle: NonNull<rd::rd_kafka_topic_t>,
    mut record: BaseRecord<'a, K, P, ()>,
) -> Result<(), (KafkaError, BaseRecord<'a, K, P, ()>)>
where
    C: ProducerContext<DeliveryOpaque = ()>,
    K: ToBytes + ?Sized,
    P: ToBytes + ?Sized,
{
    let mem = |bytes: Option<&[u8]>| match bytes {
        Some(b) => rd::rd_kafka_vu_s__bindgen_ty_1 {
            mem: rd::rd_kafka_vu_s__bindgen_ty_1__bindgen_ty_1 { ptr: b.as_ptr() as *mut c_void, size: b.len() },
        },
        None => rd::rd_kafka_vu_s__bindgen_ty_1 {
            mem: rd::rd_kafka_vu_s__bindgen_ty_1__bindgen_ty_1 { ptr: ptr::null_mut(), size: 0 },
        },
    };
    let vu = |vtype, u| rd::rd_kafka_vu_t { vtype, u };
    use rd::rd_kafka_vtype_t::*;
    let headers = record.headers.as_ref().map_or(ptr::null_mut(), native_headers);
    let values = [
        vu(RD_KAFKA_VTYPE_RKT, rd::rd_kafka_vu_s__bindgen_ty_1 { rkt: handle.as_ptr() }),
        vu(RD_KAFKA_VTYPE_PARTITION, rd::rd_kafka_vu_s__bindgen_ty_1 { i32_: record.partition.unwrap_or(-1) }),
        vu(RD_KAFKA_VTYPE_MSGFLAGS, rd::rd_kafka_vu_s__bindgen_ty_1 { i: rd::RD_KAFKA_MSG_F_COPY }),
        vu(RD_KAFKA_VTYPE_VALUE, mem(record.payload.map(ToBytes::to_bytes))),
        vu(RD_KAFKA_VTYPE_KEY, mem(record.key.map(ToBytes::to_bytes))),
        vu(RD_KAFKA_VTYPE_TIMESTAMP, rd::rd_kafka_vu_s__bindgen_ty_1 { i64_: record.timestamp.unwrap_or(0) }),
        vu(RD_KAFKA_VTYPE_HEADERS, rd::rd_kafka_vu_s__bindgen_ty_1 { headers }),
    ];
    let rk = producer.client().native_ptr();
    // SAFETY: every pointer in `values` lives until the call returns, and
    // librdkafka copies what it keeps (`RD_KAFKA_MSG_F_COPY`); the headers
    // list is taken only on success (below).
    let error = unsafe { rd::rd_kafka_produceva(rk, values.as_ptr(), values.len()) };
    if error.is_null() {
        // librdkafka owns the headers now.
        std::mem::forget(record.headers.take());
        return Ok(());
    }
    // SAFETY: an error object returned to us, read and released once.
    let code = unsafe {
        let code = rd::rd_kafka_error_code(error);
        rd::rd_kafka_error_destroy(error);
        code
    };
    Err((KafkaError::MessageProduction(code.into()), record))
}

/// The native list behind `headers`: rust-rdkafka's `BorrowedHeaders` is
/// placed at its address ([`OwnedHeaders::as_borrowed`]), and its own
/// pointer accessor is private to the crate (tested below).
fn native_headers(headers: &OwnedHeaders) -> *mut rd::rd_kafka_headers_t {
    ptr::from_ref(headers.as_borrowed()).cast_mut().cast()
}

#[cfg(test)]
mod tests {
    use rdkafka::message::Header;

    use super::*;

    #[test]
    fn the_native_headers_are_the_list_built() {
        let headers = OwnedHeaders::new_with_capacity(2)
            .insert(Header { key: "a", value: Some(&b"1"[..]) })
            .insert(Header { key: "b", value: None::<&[u8]> });
        // SAFETY: the list lives as long as `headers`.
        assert_eq!(unsafe { rd::rd_kafka_header_cnt(native_headers(&headers)) }, 2);
    }
}
