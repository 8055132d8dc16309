//! The per-entry shapes the API walkers share: which `[topic, [partition…]]` entries a principal
//! may act on, and the entries Kafka answers for the others.
//!
//! Many responses report a denial per partition inside a per-topic entry, with the same shape
//! and different field names (`OffsetCommitResponseTopic`, `TxnOffsetCommitResponseTopic`,
//! `ListOffsetsTopicResponse`, …). Each such type is described once, in the table below: the
//! fields that name the topic and list the partitions, and what Kafka puts in a denied partition
//! besides its index and error code (`-1` offsets and the like, as `KafkaApis` builds them). The
//! walkers then answer locally ([`respond_denied`]) or put the denied entries back into the
//! upstream's response ([`put_back`]) without building the entries themselves.

use bytes::Bytes;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::describe_producers_response::{PartitionResponse, TopicResponse};
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponsePartition, OffsetFetchResponsePartitions, OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    ApiKey, DeleteRecordsResponse, DescribeProducersResponse, FetchResponse, ListOffsetsResponse,
    OffsetCommitResponse, OffsetDeleteResponse, OffsetForLeaderEpochResponse, ProduceResponse,
    TopicName, TxnOffsetCommitResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use smallvec::SmallVec;

use super::check::{Checker, Loud};
use super::wire::{PlanError, TopicPartitions, Topics};
use super::{Outcome, Refusal, Request, Response, Rewrite};
use crate::acl::{AclOperation, ResourceType};
use crate::errors::ErrorCode;

/// TOPIC_AUTHORIZATION_FAILED, the code of a topic denied by its own ACLs.
pub(crate) const TOPIC_DENIED: i16 = ErrorCode::TOPIC_AUTHORIZATION_FAILED.0;
/// GROUP_AUTHORIZATION_FAILED.
pub(crate) const GROUP_DENIED: i16 = ErrorCode::GROUP_AUTHORIZATION_FAILED.0;
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
pub(crate) const TXN_DENIED: i16 = ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED.0;

/// A string field of a response.
pub(crate) fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// A topic-name field of a response.
pub(crate) fn topic_name(s: &str) -> TopicName {
    TopicName(text(s))
}

/// For each entry of `topics`, whether `operation` on its topic is allowed (one decision per
/// distinct name, logged either way: these are enforcement checks).
pub(crate) fn allowed_topics(
    chk: &mut Checker<'_>,
    operation: AclOperation,
    topics: &Topics<'_>,
) -> SmallVec<[bool; 8]> {
    let allowed = chk.allowed_names(
        operation,
        ResourceType::Topic,
        topics.entries.iter().map(|e| e.name.as_str()),
        Loud::Yes,
    );
    topics
        .entries
        .iter()
        .map(|e| allowed.contains(&e.name))
        .collect()
}

/// A response's per-topic entry that carries an error per partition.
pub(crate) trait TopicErrors: Sized {
    /// The entry for topic `name` with `code` on each of `partitions`, the other fields as Kafka
    /// sets them for a denied partition.
    fn denied(name: &str, partitions: &[i32], code: i16) -> Self;
    /// The topic this entry is about.
    fn topic(&self) -> &str;
    /// The partition indexes this entry lists.
    fn partition_indexes(&self) -> Vec<i32>;
}

/// The entries for `denied` (topics with their partitions, in request order), all with `code`.
pub(crate) fn denied_topics<T: TopicErrors>(denied: &[(String, Vec<i32>)], code: i16) -> Vec<T> {
    denied
        .iter()
        .map(|(name, partitions)| T::denied(name, partitions, code))
        .collect()
}

/// Implements [`TopicErrors`] for response entries, one line of the table per type:
/// `Entry { topic field, partitions field: Partition { index field, error field, other = value… } }`.
macro_rules! topic_errors {
    ($($entry:ty {
        $name:ident,
        $partitions:ident: $partition:ty { $index:ident, $code:ident $(, $field:ident = $value:expr)* }
    })*) => {$(
        impl TopicErrors for $entry {
            fn denied(name: &str, partitions: &[i32], code: i16) -> Self {
                let mut entry = Self::default();
                entry.$name = topic_name(name);
                entry.$partitions = partitions
                    .iter()
                    .map(|&index| {
                        let mut partition = <$partition>::default();
                        partition.$index = index;
                        partition.$code = code;
                        $(partition.$field = $value;)*
                        partition
                    })
                    .collect();
                entry
            }
            fn topic(&self) -> &str {
                self.$name.0.as_str()
            }
            fn partition_indexes(&self) -> Vec<i32> {
                self.$partitions.iter().map(|p| p.$index).collect()
            }
        }
    )*};
}

topic_errors! {
    TopicProduceResponse {
        name,
        partition_responses: PartitionProduceResponse {
            index, error_code, base_offset = -1, log_append_time_ms = -1, log_start_offset = -1
        }
    }
    FetchableTopicResponse {
        topic,
        partitions: PartitionData {
            partition_index, error_code, high_watermark = -1, last_stable_offset = -1,
            log_start_offset = -1, records = Some(Bytes::new())
        }
    }
    ListOffsetsTopicResponse {
        name,
        partitions: ListOffsetsPartitionResponse {
            partition_index, error_code, timestamp = -1, offset = -1, leader_epoch = -1
        }
    }
    OffsetForLeaderTopicResult {
        topic,
        partitions: EpochEndOffset { partition, error_code, leader_epoch = -1, end_offset = -1 }
    }
    OffsetCommitResponseTopic {
        name,
        partitions: OffsetCommitResponsePartition { partition_index, error_code }
    }
    TxnOffsetCommitResponseTopic {
        name,
        partitions: TxnOffsetCommitResponsePartition { partition_index, error_code }
    }
    OffsetDeleteResponseTopic {
        name,
        partitions: OffsetDeleteResponsePartition { partition_index, error_code }
    }
    // OffsetFetch v0–7 (top-level topics) and v8+ (topics per group).
    OffsetFetchResponseTopic {
        name,
        partitions: OffsetFetchResponsePartition {
            partition_index, error_code, committed_offset = -1, metadata = Some(text(""))
        }
    }
    OffsetFetchResponseTopics {
        name,
        partitions: OffsetFetchResponsePartitions {
            partition_index, error_code, committed_offset = -1, metadata = Some(text(""))
        }
    }
    AddPartitionsToTxnTopicResult {
        name,
        results_by_partition: AddPartitionsToTxnPartitionResult {
            partition_index, partition_error_code
        }
    }
    TopicResponse {
        name,
        partitions: PartitionResponse { partition_index, error_code }
    }
    DeleteRecordsTopicResult {
        name,
        partitions: DeleteRecordsPartitionResult { partition_index, error_code, low_watermark = -1 }
    }
}

/// A response whose per-entry results are a list of [`TopicErrors`] entries.
pub(crate) trait TopicErrorResponse: Default + Encodable + Decodable {
    /// The API it answers.
    const KEY: ApiKey;
    /// Its per-topic entry.
    type Entry: TopicErrors;
    /// The list of entries.
    fn entries(&mut self) -> &mut Vec<Self::Entry>;
}

/// Implements [`TopicErrorResponse`]: `Response => API key . entries field: Entry`.
macro_rules! topic_error_responses {
    ($($response:ty => $key:ident . $field:ident : $entry:ty),* $(,)?) => {$(
        impl TopicErrorResponse for $response {
            const KEY: ApiKey = ApiKey::$key;
            type Entry = $entry;
            fn entries(&mut self) -> &mut Vec<$entry> {
                &mut self.$field
            }
        }
    )*};
}

topic_error_responses! {
    ProduceResponse => Produce.responses: TopicProduceResponse,
    FetchResponse => Fetch.responses: FetchableTopicResponse,
    ListOffsetsResponse => ListOffsets.topics: ListOffsetsTopicResponse,
    OffsetForLeaderEpochResponse => OffsetForLeaderEpoch.topics: OffsetForLeaderTopicResult,
    OffsetCommitResponse => OffsetCommit.topics: OffsetCommitResponseTopic,
    TxnOffsetCommitResponse => TxnOffsetCommit.topics: TxnOffsetCommitResponseTopic,
    OffsetDeleteResponse => OffsetDelete.topics: OffsetDeleteResponseTopic,
    DescribeProducersResponse => DescribeProducers.topics: TopicResponse,
    DeleteRecordsResponse => DeleteRecords.topics: DeleteRecordsTopicResult,
}

/// Answers locally with a response that holds only the `denied` entries, each with `code`.
pub(crate) fn respond_denied<R: TopicErrorResponse>(
    req: &Request<'_>,
    denied: &[(String, Vec<i32>)],
    code: i16,
) -> Result<Outcome, Refusal> {
    let mut body = R::default();
    *body.entries() = denied_topics(denied, code);
    req.respond(&body)
}

/// [`split_topics`](super::split_topics) for a response of [`TopicErrors`] entries: when every
/// entry is denied, the answer is local, with TOPIC_AUTHORIZATION_FAILED on each partition.
pub(crate) fn split_topic_errors<R: TopicErrorResponse>(
    req: &Request<'_>,
    topics: &Topics,
    keep: &[bool],
    rewrite: impl FnOnce(TopicPartitions) -> Rewrite,
) -> Result<Outcome, Refusal> {
    super::split_topics(
        req,
        topics,
        keep,
        |denied| respond_denied::<R>(req, denied, TOPIC_DENIED),
        rewrite,
    )
}

/// Puts the entries denied before forwarding back into the upstream's response, after the
/// upstream's own entries, with TOPIC_AUTHORIZATION_FAILED.
pub(crate) fn put_back<R: TopicErrorResponse>(
    response: &Response<'_>,
    denied: &TopicPartitions,
) -> Result<Bytes, PlanError> {
    let mut body: R = response.decode(R::KEY)?;
    body.entries()
        .extend(denied_topics::<R::Entry>(denied, TOPIC_DENIED));
    response.encode(R::KEY, &body)
}
