//! Who hears about the set's rollouts, and how the last delivery to each went
//! (`status.notifications`): the `Subscribed:` lines of the text. `-o json|yaml` shows the records as
//! the operator wrote them.

use crate::style::Role;

/// One line per subscription: who hears of what, and how the last delivery went.
pub(super) fn notification_lines(records: &[cmset_api::NotificationStatus]) -> Vec<(String, Option<Role>)> {
    use cmset_api::NotificationResult;
    records
        .iter()
        .map(|r| {
            let target = match r.recipient.as_str() {
                "" => r.service.clone(),
                recipient => format!("{}:{recipient}", r.service),
            };
            let when = r
                .time
                .as_ref()
                .map(|t| format!(" at {}", t.0))
                .unwrap_or_default();
            let (last, role) = match r.result {
                NotificationResult::Subscribed => ("nothing sent yet".to_string(), None),
                NotificationResult::Delivered => (
                    format!(
                        "delivered{when} ({} attempt{})",
                        r.attempts,
                        if r.attempts == 1 { "" } else { "s" }
                    ),
                    Some(Role::Good),
                ),
                NotificationResult::Retrying => (
                    format!(
                        "retrying (last tried{when}, {} attempts so far): {}",
                        r.attempts,
                        r.message.as_deref().unwrap_or("no reason given")
                    ),
                    Some(Role::Attention),
                ),
                NotificationResult::Failed => (
                    format!(
                        "failed{when} after {} attempts: {}",
                        r.attempts,
                        r.message.as_deref().unwrap_or("no reason given")
                    ),
                    Some(Role::Bad),
                ),
            };
            (format!("{} to {target}: {last}", r.trigger), role)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use cmset_core::set::SetRef;

    use crate::revisions::revisions_of;
    use crate::status::fixtures::*;
    use crate::status::{render_text, status_report};
    use crate::style::Palette;

    #[test]
    fn subscriptions_and_their_last_deliveries_are_listed() {
        use cmset_api::{NotificationResult, NotificationStatus};
        let mut set = ready_set(vec![]);
        let at = |t: &str| {
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                t.parse().unwrap(),
            ))
        };
        set.status.as_mut().unwrap().notifications = Some(vec![
            NotificationStatus {
                trigger: "on-rollout-failed".into(),
                service: "slack".into(),
                recipient: "ops".into(),
                once: "app-cccccccccc@2026-11-26T09:00:00Z".into(),
                result: NotificationResult::Delivered,
                time: at("2026-11-26T09:05:00Z"),
                attempts: 3,
                ..Default::default()
            },
            NotificationStatus {
                trigger: "on-rolled-back".into(),
                service: "pager".into(),
                result: NotificationResult::Failed,
                time: at("2026-11-26T09:05:01Z"),
                attempts: 4,
                message: Some("the receiver answered 503".into()),
                ..Default::default()
            },
            NotificationStatus {
                trigger: "on-rollout-completed".into(),
                service: "teams".into(),
                recipient: "prod".into(),
                ..Default::default()
            },
        ]);
        let set = SetRef::from(&set);
        let cms = cms();
        let report = status_report(set, &revisions_of(set, &cms), &[]);
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains(
                "Subscribed:   on-rollout-failed to slack:ops: delivered at 2026-11-26T09:05:00Z (3 attempts)\n\
                 \x20             on-rolled-back to pager: failed at 2026-11-26T09:05:01Z after 4 attempts: the receiver answered 503\n\
                 \x20             on-rollout-completed to teams:prod: nothing sent yet\n"
            ),
            "{text}"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["notifications"][0]["recipient"], "ops");
        assert_eq!(json["notifications"][1]["result"], "Failed");
        // Nobody subscribed: no line, no key.
        let quiet = status_report(SetRef::from(&ready_set(vec![])), &[], &[]);
        assert!(!render_text(&quiet, Palette::PLAIN).contains("Subscribed:"));
        assert!(
            serde_json::to_value(&quiet)
                .unwrap()
                .get("notifications")
                .is_none()
        );
    }
}
