//! OffsetFetch: DESCRIBE on each group, DESCRIBE on each topic. The request is read-only: it is
//! forwarded whole and the response is rewritten (denied groups and topics replaced by their
//! errors), except that a single denied group (v1–7) is answered locally.

use bytes::Bytes;
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponseTopic,
};
use kafka_protocol::messages::{ApiKey, OffsetFetchResponse};

use super::super::check::{Checker, Loud};
use super::super::entries::{denied_topics, TopicErrors, GROUP_DENIED, TOPIC_DENIED};
use super::super::wire::{self, PlanError, TopicPartitions};
use super::super::{Outcome, Refusal, Request, Response, Rewrite};
use crate::acl::{AclOperation, ResourceType};

/// How to rewrite an OffsetFetch response: per group (in request order), whether it was denied
/// and whether it asked for all topics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct OffsetFetchPlan {
    groups: Vec<FetchGroup>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct FetchGroup {
    id: String,
    allowed: bool,
    all_topics: bool,
}

/// The topics array of OffsetFetch: `[name, [partition_index]]`, nullable (null: all topics).
fn fetch_topics(w: &mut wire::Walk<'_>) -> Result<Option<TopicPartitions>, Refusal> {
    let Some(n) = w.array_len()? else {
        return Ok(None);
    };
    let mut out = Vec::new();
    for _ in 0..n {
        let name = w.string()?;
        let partitions = w.i32s()?;
        w.tags()?;
        out.push((name, partitions));
    }
    Ok(Some(out))
}

/// OffsetFetch v1–9: one group up to v7, a list of groups from v8.
pub(crate) fn offset_fetch(req: &Request<'_>, chk: &mut Checker<'_>) -> Result<Outcome, Refusal> {
    let v = req.version;
    let mut w = req.walk();
    let mut groups = Vec::new();
    if v <= 7 {
        let id = w.string()?;
        let topics = fetch_topics(&mut w)?;
        groups.push((id, topics));
    } else {
        let n = w.array_len_required()?;
        for _ in 0..n {
            let id = w.string()?;
            if v >= 9 {
                let _member_id = w.nullable_string()?;
                let _member_epoch = w.i32()?;
            }
            let topics = fetch_topics(&mut w)?;
            w.tags()?;
            groups.push((id, topics));
        }
    }
    if v >= 7 {
        let _require_stable = w.bool()?;
    }
    w.tags()?;
    w.finish()?;
    let mut plan = OffsetFetchPlan { groups: Vec::new() };
    for (id, topics) in &groups {
        let allowed = chk.allowed(AclOperation::Describe, ResourceType::Group, id, Loud::Yes);
        plan.groups.push(FetchGroup {
            id: id.clone(),
            allowed,
            all_topics: topics.is_none(),
        });
    }
    if v <= 7 && plan.groups.iter().all(|g| !g.allowed) {
        // Kafka's error response: the top-level code (v2+), or each requested partition (v1).
        let mut body = OffsetFetchResponse::default();
        if v >= 2 {
            body.error_code = GROUP_DENIED;
        } else if let Some((_, Some(topics))) = groups.first() {
            body.topics = denied_topics::<OffsetFetchResponseTopic>(topics, GROUP_DENIED);
        }
        return req.respond(&body);
    }
    Ok(Outcome::Forward(
        req.frame.clone(),
        Rewrite::OffsetFetch(plan),
    ))
}

impl OffsetFetchPlan {
    pub(crate) fn apply(
        &self,
        response: &Response<'_>,
        chk: &mut Checker<'_>,
    ) -> Result<Bytes, PlanError> {
        let mut body: OffsetFetchResponse = response.decode(ApiKey::OffsetFetch)?;
        if response.version <= 7 {
            // One group, and allowed: a denied one was answered locally.
            if let Some(group) = self.groups.first() {
                filter_topics(&mut body.topics, group.all_topics, chk);
            }
        } else {
            for g in &mut body.groups {
                match self.groups.iter().find(|p| p.id == g.group_id.0.as_str()) {
                    Some(plan) if plan.allowed => {
                        filter_topics(&mut g.topics, plan.all_topics, chk)
                    }
                    // Denied, or a group the client did not ask about: never pass it on.
                    _ => {
                        *g = OffsetFetchResponseGroup::default()
                            .with_group_id(g.group_id.clone())
                            .with_error_code(GROUP_DENIED);
                    }
                }
            }
        }
        response.encode(ApiKey::OffsetFetch, &body)
    }
}

/// The topics of an allowed group's answer: an all-topics fetch lists only the topics the
/// principal may DESCRIBE (denials not logged, as Kafka filters quietly); a requested topic it
/// may not DESCRIBE keeps its partitions, each with TOPIC_AUTHORIZATION_FAILED and no offset.
fn filter_topics<T: TopicErrors>(topics: &mut Vec<T>, all_topics: bool, chk: &mut Checker<'_>) {
    let loud = if all_topics {
        Loud::IfAllowed
    } else {
        Loud::Yes
    };
    let ok = chk.allowed_names(
        AclOperation::Describe,
        ResourceType::Topic,
        topics.iter().map(T::topic),
        loud,
    );
    // The answers borrow the topic names; settle each entry's fate before changing the list.
    let keep: Vec<bool> = topics.iter().map(|t| ok.contains(t.topic())).collect();
    drop(ok);
    if all_topics {
        let mut kept = keep.iter();
        topics.retain(|_| kept.next().copied().unwrap_or(false));
    } else {
        for (t, _) in topics.iter_mut().zip(&keep).filter(|(_, k)| !**k) {
            *t = T::denied(t.topic(), &t.partition_indexes(), TOPIC_DENIED);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::testing::*;
    use super::*;
    use kafka_protocol::messages::offset_fetch_request::{
        OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
    };
    use kafka_protocol::messages::offset_fetch_response::{
        OffsetFetchResponsePartition, OffsetFetchResponsePartitions, OffsetFetchResponseTopics,
    };
    use kafka_protocol::messages::{OffsetFetchRequest, TopicName};

    #[test]
    fn offset_fetch_v8_masks_requested_topics_that_may_not_be_described() {
        let authz = AllowList::new()
            .allow(AclOperation::Describe, ResourceType::Group, "ok")
            .allow(AclOperation::Describe, ResourceType::Topic, "a")
            .arc();
        for version in [8, 9] {
            let req =
                OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
                    .with_group_id(g("ok"))
                    .with_topics(Some(
                        ["a", "b"]
                            .iter()
                            .map(|t| {
                                OffsetFetchRequestTopics::default()
                                    .with_name(TopicName(s(t)))
                                    .with_partition_indexes(vec![4])
                            })
                            .collect(),
                    ))]);
            let (_, plan) = forwarded(&run(&authz, &frame(ApiKey::OffsetFetch, version, &req)));
            let upstream = OffsetFetchResponse::default().with_groups(vec![
                OffsetFetchResponseGroup::default()
                    .with_group_id(g("ok"))
                    .with_topics(
                        ["a", "b"]
                            .iter()
                            .map(|t| {
                                OffsetFetchResponseTopics::default()
                                    .with_name(TopicName(s(t)))
                                    .with_partitions(vec![OffsetFetchResponsePartitions::default()
                                        .with_partition_index(4)
                                        .with_committed_offset(55)
                                        .with_committed_leader_epoch(7)
                                        .with_metadata(Some(s("secret")))])
                            })
                            .collect(),
                    ),
            ]);
            let merged: OffsetFetchResponse =
                applied(&plan, ApiKey::OffsetFetch, version, &upstream);
            let topics = &merged.groups[0].topics;
            assert_eq!(topics[0].partitions[0].committed_offset, 55);
            let denied = &topics[1].partitions[0];
            assert_eq!(
                (
                    denied.partition_index,
                    denied.committed_offset,
                    denied.committed_leader_epoch,
                    denied.metadata.as_ref().map(|m| m.to_string()),
                    denied.error_code
                ),
                (4, -1, -1, Some(String::new()), 29)
            );
        }
    }

    #[test]
    fn offset_fetch_hides_denied_groups_and_topics() {
        let authz = AllowList::new()
            .allow(AclOperation::Describe, ResourceType::Group, "ok")
            .allow(AclOperation::Describe, ResourceType::Topic, "a")
            .arc();
        // v1–7: one group; explicit topics.
        for version in [1, 2, 6, 7] {
            let req = OffsetFetchRequest::default()
                .with_group_id(g("ok"))
                .with_topics(Some(vec![
                    OffsetFetchRequestTopic::default()
                        .with_name(TopicName(s("a")))
                        .with_partition_indexes(vec![0]),
                    OffsetFetchRequestTopic::default()
                        .with_name(TopicName(s("b")))
                        .with_partition_indexes(vec![0]),
                ]));
            let f = frame(ApiKey::OffsetFetch, version, &req);
            let (out, plan) = forwarded(&run(&authz, &f));
            assert_eq!(out, f);
            let upstream = OffsetFetchResponse::default().with_topics(
                ["a", "b"]
                    .iter()
                    .map(|t| {
                        OffsetFetchResponseTopic::default()
                            .with_name(TopicName(s(t)))
                            .with_partitions(vec![
                                OffsetFetchResponsePartition::default().with_committed_offset(55)
                            ])
                    })
                    .collect(),
            );
            let merged: OffsetFetchResponse =
                applied(&plan, ApiKey::OffsetFetch, version, &upstream);
            assert_eq!(merged.topics[0].partitions[0].committed_offset, 55);
            assert_eq!(merged.topics[1].partitions[0].committed_offset, -1);
            assert_eq!(merged.topics[1].partitions[0].error_code, 29);
            let denied = frame(ApiKey::OffsetFetch, version, &req.with_group_id(g("no")));
            let r: OffsetFetchResponse = response_body(
                ApiKey::OffsetFetch,
                version,
                &responded(&run(&authz, &denied)),
            );
            if version >= 2 {
                assert_eq!(r.error_code, 30);
            } else {
                assert!(r
                    .topics
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .all(|p| p.error_code == 30));
            }
        }
        // v8–9: several groups, all-topics fetch filtered.
        for version in [8, 9] {
            let req = OffsetFetchRequest::default().with_groups(vec![
                OffsetFetchRequestGroup::default()
                    .with_group_id(g("ok"))
                    .with_topics(None),
                OffsetFetchRequestGroup::default()
                    .with_group_id(g("no"))
                    .with_topics(Some(vec![OffsetFetchRequestTopics::default()
                        .with_name(TopicName(s("a")))
                        .with_partition_indexes(vec![0])])),
            ]);
            let (_, plan) = forwarded(&run(&authz, &frame(ApiKey::OffsetFetch, version, &req)));
            let topics = |names: &[&str]| -> Vec<OffsetFetchResponseTopics> {
                names
                    .iter()
                    .map(|t| {
                        OffsetFetchResponseTopics::default()
                            .with_name(TopicName(s(t)))
                            .with_partitions(vec![
                                OffsetFetchResponsePartitions::default().with_committed_offset(55)
                            ])
                    })
                    .collect()
            };
            let upstream = OffsetFetchResponse::default().with_groups(vec![
                OffsetFetchResponseGroup::default()
                    .with_group_id(g("ok"))
                    .with_topics(topics(&["a", "b"])),
                OffsetFetchResponseGroup::default()
                    .with_group_id(g("no"))
                    .with_topics(topics(&["a"])),
            ]);
            let merged: OffsetFetchResponse =
                applied(&plan, ApiKey::OffsetFetch, version, &upstream);
            let ok = &merged.groups[0];
            assert_eq!(ok.topics.len(), 1);
            assert_eq!(ok.topics[0].name.0.as_str(), "a");
            let no = &merged.groups[1];
            assert_eq!(no.error_code, 30);
            assert!(no.topics.is_empty());
        }
    }
}
