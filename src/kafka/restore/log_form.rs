//! A restore across forms of the slice log (`slicing.log_format`,
//! docs/dev/batched-slice-log.md, "Upgrade path").
//!
//! Positions of the two forms do not compare: the records form's are
//! slice-log offsets, the batch form's `offset · 2^16 + index`. A snapshot
//! records its form ([`LogForm`]); a slice restored from one of the other
//! form is carried over or refused here, before its held records are read
//! back in the configured form.
//!
//! - Records to batches (the upgrade): a slice whose snapshot at offset X
//!   holds no record waiting for the watermark, and whose log holds no
//!   records-form copy at X or after, goes on at position `X · 2^16`. Every
//!   position it wrote before (release positions in the outputs' tails,
//!   idle flushes logged) is below X, so below `X · 2^16`: nothing is
//!   replayed, which is right since nothing is left to judge in the old
//!   form. Control records after X (the routers' progress, delete
//!   requests) are one record at index 0 in both forms, and batches after
//!   X are the new form's own (a run that stopped before its first
//!   snapshot): neither stops the carry-over. Anything else is refused,
//!   naming the upgrade steps: guessing where undrained copies go would
//!   lose or repeat them.
//! - Batches to records (a downgrade): refused, drained or not. The batch
//!   form's positions stay behind in the outputs' `dedupd.release` headers
//!   and in the flush log, where a records-form slice would read them as
//!   offsets far beyond its log (a restore refusing the outputs, or a
//!   replay bound that silences every later output).

use super::restorer::Restorer;
use crate::engine::SliceState;
use crate::engine::slice::LogForm;
use crate::kafka::checkpoint::{ReadFrom, read_partition};
use crate::kafka::consumed::Consumed;
use crate::kafka::slice_log::{Holds, Kind, LogRecord, read_order};
use crate::kafka::{KafkaLayerError, headers};

/// The rule a refusal names.
const RULE: &str = "the form of a slice log changes only once the slice has drained it in the records form (every \
                    record taken in, none waiting for the watermark, a checkpoint after that), and a slice log \
                    written in the batch form stays in it";

/// The upgrade steps a refusal of an undrained slice names.
const UPGRADE_STEPS: &str = "to keep running, set slicing.log_format = \"records\"; to upgrade, stop the producers \
     of the input (or wait for a quiet time), run with slicing.log_format = \"records\" until /v1/slices shows \
     lag 0, waiting 0 for every slice, stop dedupd gracefully (SIGTERM: every slice takes a snapshot as it \
     stops), and start it with slicing.log_format = \"batches\" (docs/running.md, \"Changing \
     slicing.log_format\")";

impl Restorer<'_> {
    /// The form the configured slice log's positions are in.
    pub(super) fn log_form(&self) -> LogForm {
        match self.log {
            Holds::Batches => LogForm::Batches,
            Holds::Copies | Holds::Input | Holds::ReadOrders => LogForm::Records,
        }
    }

    /// Carries `state`, just decoded from a snapshot, over to the
    /// configured form, or refuses it (see the module documentation).
    pub(super) fn carry_over(&self, state: &mut SliceState) -> Result<(), KafkaLayerError> {
        let configured = self.log_form();
        if state.log_form == configured {
            return Ok(());
        }
        let copy_after = match state.log_form {
            LogForm::Records if state.unfilled.is_empty() => self.first_copy_from(state.slice, state.next_offset)?,
            _ => None,
        };
        // The worker names the slice ("slice N: restore failed: …").
        carry_over(state, configured, copy_after).map_err(KafkaLayerError::Settings)
    }

    /// The offset of the first records-form copy of an input record in the
    /// slice log at `offset` or after (not a control record, not a batch).
    fn first_copy_from(&self, slice: u32, offset: u64) -> Result<Option<u64>, KafkaLayerError> {
        let mut first = None;
        let at = ReadFrom::Offset(i64::try_from(offset).unwrap_or(i64::MAX));
        read_partition(self.reader, self.slice_topic, slice as i32, at, |o, _, _, m| {
            let record = LogRecord::read(Holds::Copies, &Consumed::of(m));
            let batch = record.headers.iter().any(|(k, _)| *k == headers::BATCH);
            if first.is_none() && record.kind == Kind::Input && !batch {
                first = Some(o as u64);
            }
        })?;
        Ok(first)
    }
}

/// [`Restorer::carry_over`] once the log is read: `copy_after` is the
/// first records-form copy at the snapshot's offset or after. The error
/// names the setting, its value, the rule and what to do.
fn carry_over(state: &mut SliceState, configured: LogForm, copy_after: Option<u64>) -> Result<(), String> {
    let (from, at) = (state.log_form, state.next_offset);
    let refusal = |why: String, what_to_do: &str| {
        format!(
            "cannot go on with slicing.log_format = \"{}\" from its snapshot at slice position {at}, taken with \
             \"{}\": {why}; rule: {RULE}; {what_to_do}",
            configured.setting(),
            from.setting()
        )
    };
    if from == LogForm::Batches {
        let why = "the batch form's positions (slice-log offset * 65536 + index: in the snapshot, the flush log and \
                   the outputs' dedupd.release headers) are not slice-log offsets"
            .to_string();
        return Err(refusal(why, "set slicing.log_format = \"batches\" again"));
    }
    let held = state.unfilled.len();
    if held > 0 {
        let why = format!("{held} records were waiting for the watermark in it (the log was not drained)");
        return Err(refusal(why, UPGRADE_STEPS));
    }
    if let Some(offset) = copy_after {
        let why = format!(
            "the slice log holds records of the records form the slice has not taken in, the first at offset \
             {offset} (the log was not drained)"
        );
        return Err(refusal(why, UPGRADE_STEPS));
    }
    state.next_offset = read_order::position(state.next_offset, 0);
    state.flushes_next = read_order::position(state.flushes_next, 0);
    state.log_form = configured;
    log::info!(
        "slice {}: the snapshot at slice-log offset {at} was taken with slicing.log_format = \"records\" and \
         nothing is left to take in in that form: going on in the batch form at position {}",
        state.slice,
        state.next_offset
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::OrderSettings;
    use crate::filter::FilterSpec;

    fn slice_at(offset: u64, form: LogForm) -> SliceState {
        let params = FilterSpec { window_ms: 2_000, expected_keys: 100, ..FilterSpec::default() }.resolve().unwrap();
        let order = OrderSettings { lateness_ms: 300, max_clock_jump_ms: 100_000, jump_confirmations: 3 };
        let mut s = SliceState::new(3, crate::filter::FilterChoice::Timer(params), offset, order);
        s.flushes_next = offset.saturating_sub(2);
        s.log_form = form;
        s
    }

    /// A drained records-form slice goes on at `X · 2^16`, its flush mark
    /// with it; the state says it is in the batch form now.
    #[test]
    fn a_drained_records_snapshot_goes_on_in_the_batch_form() {
        let mut s = slice_at(120, LogForm::Records);
        carry_over(&mut s, LogForm::Batches, None).unwrap();
        assert_eq!((s.next_offset, s.flushes_next, s.log_form), (120 << 16, 118 << 16, LogForm::Batches));
    }

    /// Undrained (records after the snapshot, or records waiting for the
    /// watermark): refused naming the setting, the value, the rule and the
    /// steps, the state untouched. A batch-form snapshot is never carried
    /// back to records.
    #[test]
    fn an_undrained_log_or_a_downgrade_is_refused() {
        let mut s = slice_at(120, LogForm::Records);
        let e = carry_over(&mut s, LogForm::Batches, Some(125)).unwrap_err();
        assert!(e.starts_with("cannot go on with slicing.log_format = \"batches\" from its snapshot at slice position 120, taken with \"records\": the slice log holds records of the records form the slice has not taken in, the first at offset 125"), "{e}");
        assert!(e.contains("rule: the form of a slice log changes only once") && e.contains("lag 0, waiting 0"), "{e}");
        assert_eq!((s.next_offset, s.log_form), (120, LogForm::Records));
        s.unfilled.push((117, false));
        let e = carry_over(&mut s, LogForm::Batches, None).unwrap_err();
        assert!(e.contains("1 records were waiting for the watermark in it"), "{e}");
        let mut b = slice_at(120 << 16, LogForm::Batches);
        let e = carry_over(&mut b, LogForm::Records, None).unwrap_err();
        assert!(e.starts_with("cannot go on with slicing.log_format = \"records\""), "{e}");
        assert!(e.contains("set slicing.log_format = \"batches\" again"), "{e}");
        assert_eq!(b.log_form, LogForm::Batches);
    }
}
