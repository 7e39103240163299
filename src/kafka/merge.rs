//! `dedupd checkpoint merge`: reads the newest snapshot of every old slice
//! from the checkpoint topic, merges them ([`crate::engine::merge`]) and
//! writes the new slices' snapshots, which a daemon started with the new
//! `filter.slices` restores.
//!
//! For a stopped, drained daemon: every old slice's snapshot must be at the
//! end of its slice-log partition (everything judged and snapshotted; the
//! daemon snapshots every slice when it stops), or the records after it
//! would be lost to the merge. Nothing is written unless every new slice
//! was built and checked (encoded and decoded under the new parameters).

use super::checkpoint::{CheckpointStore, Manifest, ReadError, ReadFrom, read_partition};
use super::clients::{self, PlainContext, Reader};
use super::{Context, KafkaLayerError};
use crate::config::{Resolved, SlicingMode};
use crate::engine::merge::{merge, sources};
use crate::engine::slice as slice_codec;
use crate::filter::FilterChoice;

/// What a merge did, per new slice: its old slices and where it starts.
#[derive(Debug)]
pub struct Merged {
    pub slice: u32,
    pub from_slices: Vec<u32>,
    pub offset: u64,
    pub generations: usize,
    pub bytes: usize,
}

/// Merges the checkpoints of `old_cfg` (with `filter.slices` = the old
/// count) into `new_cfg`'s count.
pub fn merge_checkpoints(old_cfg: &Resolved, new_cfg: &Resolved) -> Result<Vec<Merged>, KafkaLayerError> {
    let fail = |detail: String| KafkaLayerError::Merge(format!("checkpoint merge: {detail}"));
    if old_cfg.slicing != SlicingMode::Repartition {
        return Err(fail(
            "needs slicing.mode = \"repartition\" (with input-partitions the slices are the input topic's \
             partitions, which a merge cannot change)"
                .into(),
        ));
    }
    let (from, to) = (old_cfg.settings.filter.slices, new_cfg.settings.filter.slices);
    let resolve = |cfg: &Resolved| -> Result<FilterChoice, KafkaLayerError> {
        cfg.filter_choice().map_err(|e| fail(format!("filter settings: {e:?}")))
    };
    let (old_filter, new_filter) = (resolve(old_cfg)?, resolve(new_cfg)?);
    let store = CheckpointStore::new(old_cfg)?;
    let id = &old_cfg.settings.app.id;
    let reader: Reader = clients::reader(old_cfg, &format!("{id}-merge-reader"))
        .create_with_context(PlainContext)
        .context(|| "creating the merge reader".into())?;
    let slice_topic = old_cfg.slice_topic();
    let mut old = Vec::with_capacity(from as usize);
    let mut manifests: Vec<Manifest> = Vec::with_capacity(from as usize);
    for slice in 0..from {
        let (manifest, bytes) = match store.read_latest(slice) {
            Ok(Some(found)) => found,
            Ok(None) => {
                return Err(fail(format!(
                    "slice {slice} has no snapshot: stop the daemon (it snapshots every slice) and merge then"
                )));
            }
            Err(ReadError::Kafka(e)) => return Err(e),
            Err(ReadError::Corrupt(_, why)) => return Err(fail(format!("slice {slice}: {why}"))),
        };
        store.check_owner(&manifest)?;
        if manifest.params != old_filter.fingerprint() {
            return Err(fail(format!(
                "slice {slice}'s snapshot was taken with {} but the settings for {from} slices give {}",
                manifest.params,
                old_filter.fingerprint()
            )));
        }
        let state = slice_codec::decode(&bytes, slice, &old_filter, old_cfg.order)
            .map_err(|e| fail(format!("slice {slice}: {e}")))?;
        // The listed high watermark may be the last batch's base + 1
        // (Tansu): the end is one past the last record read from there.
        let mut end = 0;
        read_partition(&reader, &slice_topic, slice as i32, ReadFrom::Last, |offset, _, _, _| {
            end = offset as u64 + 1;
        })?;
        if state.next_offset < end {
            return Err(fail(format!(
                "slice {slice}'s snapshot is at offset {} but {slice_topic}/{slice} ends at {end}: stop the daemon \
                 once it has judged everything (it snapshots every slice when it stops), then merge",
                state.next_offset
            )));
        }
        old.push(state);
        manifests.push(manifest);
    }
    let merged = merge(old, to, &new_filter, new_cfg.order).map_err(|e| fail(e.to_string()))?;
    let plan = sources(from, to);
    let mut images = Vec::with_capacity(merged.len());
    for state in &merged {
        let bytes = slice_codec::encode(state);
        // Checked before anything is written: the daemon will restore exactly this.
        let back = slice_codec::decode(&bytes, state.slice, &new_filter, new_cfg.order)
            .map_err(|e| fail(format!("new slice {}: {e}", state.slice)))?;
        if &back != state {
            return Err(fail(format!("new slice {} does not decode to itself", state.slice)));
        }
        images.push(bytes);
    }
    let mut report = Vec::with_capacity(merged.len());
    for (state, bytes) in merged.iter().zip(images) {
        let j = state.slice;
        let previous = &manifests[j as usize];
        store.write(j, state.next_offset, &bytes, &new_filter.fingerprint(), Some(previous))?;
        report.push(Merged {
            slice: j,
            from_slices: plan[j as usize].clone(),
            offset: state.next_offset,
            generations: state.filter.figures().generations,
            bytes: bytes.len(),
        });
    }
    Ok(report)
}
