//! Change windows: unknown until listed, none when absent or not watched, the first list's timeout
//! reported, the gauge of unknown windows.

use super::*;

/// An index whose ChangeWindow watch has started and that holds set `app`.
pub(crate) fn watching_windows() -> Index {
    let index = Index::new(None);
    index.expect("ConfigMapSet");
    index.watch_windows();
    index.settle();
    index.handle::<ConfigMapSet>(&watcher::Event::InitDone);
    index.handle(&watcher::Event::Apply(set("app", 1)));
    index
}

pub(crate) fn windows_unknown(cause: UnknownCause) -> WindowsUnknown {
    WindowsUnknown {
        cause,
        detail: FORBIDDEN.to_string(),
    }
}

pub(crate) fn unknown_cause(index: &Index) -> Option<UnknownCause> {
    match index.cluster_windows_for((&set("app", 1)).into()) {
        ClusterView::Unknown(unknown) => Some(unknown.cause),
        ClusterView::Known(_) => None,
    }
}

#[test]
fn change_windows_not_listed_yet_are_unknown_and_a_refusal_holds_every_set_until_a_list() {
    let index = watching_windows();
    assert!(!index.is_ready(), "the windows have not listed yet");
    assert_eq!(
        unknown_cause(&index),
        Some(UnknownCause::NotListed),
        "until the first list, any freeze may be in force"
    );
    let triggered = index
        .windows_unavailable(windows_unknown(UnknownCause::Forbidden))
        .expect("news");
    assert_eq!(triggered.sets, sets(&["app"]), "every set says why");
    assert!(
        index.is_ready() && index.is_complete(),
        "nothing more is coming for now"
    );
    assert_eq!(unknown_cause(&index), Some(UnknownCause::Forbidden));
    assert_eq!(
        index.unobserved_readers(&cms("app")),
        vec![],
        "a ChangeWindow reads no set: the set plans, and holds its moves only"
    );
    assert!(
        index
            .windows_unavailable(windows_unknown(UnknownCause::Forbidden))
            .is_none(),
        "the same refusal again is no news"
    );
    // Listed at last: known, and the sets held for it reconcile.
    index.handle_change_window(&watcher::Event::Init, &[]);
    let released = index.handle_change_window(&watcher::Event::InitDone, &[]);
    assert_eq!(released.sets, sets(&["app"]));
    assert_eq!(unknown_cause(&index), None);
    // A later failed list makes them unknown again: the last list may be stale.
    index
        .windows_unavailable(windows_unknown(UnknownCause::ListFailed))
        .expect("news");
    assert_eq!(unknown_cause(&index), Some(UnknownCause::ListFailed));
}

#[test]
fn change_windows_whose_crd_is_absent_or_that_are_not_watched_are_none() {
    let index = watching_windows();
    index
        .windows_unavailable(windows_unknown(UnknownCause::Forbidden))
        .expect("news");
    let released = index.windows_absent();
    assert_eq!(released.sets, sets(&["app"]), "the held sets move again");
    assert!(index.is_ready() && index.is_complete());
    assert!(matches!(
        index.cluster_windows_for((&set("app", 1)).into()),
        ClusterView::Known(windows) if windows.is_empty()
    ));
    // --change-windows=false: no watch, no window, nothing unknown.
    assert_eq!(unknown_cause(&index_not_watching_windows()), None);
}

pub(crate) fn index_not_watching_windows() -> Index {
    let index = index();
    index.handle(&watcher::Event::Apply(set("app", 1)));
    index
}

#[test]
fn a_first_list_that_does_not_answer_in_time_is_reported_and_one_that_did_is_not() {
    let patience = std::time::Duration::from_secs(30);
    let late = watching_windows();
    late.windows_not_listed_within(patience);
    assert!(late.is_complete(), "the sets plan, and say why they hold");
    let unknown = late.windows_unknown().expect("still unknown");
    assert_eq!(unknown.cause, UnknownCause::NotListed);
    assert!(unknown.detail.contains("30s"), "{}", unknown.detail);

    let listed = watching_windows();
    listed.handle_change_window(&watcher::Event::InitDone, &[]);
    listed.windows_not_listed_within(patience);
    assert_eq!(listed.windows_unknown(), None);
}

#[test]
fn the_unknown_windows_gauge_counts_this_index_under_its_current_cause() {
    use crate::platform::metrics::WindowsUnknownLabels;
    let gauge = crate::engine::index::WindowsUnknownGauge::default();
    let value = |cause| gauge.get_or_create(&WindowsUnknownLabels { cause }).get();
    let index = watching_windows();
    index.count_windows_unknown(gauge.clone());
    assert_eq!(value("not_listed"), 1, "counted from the start");
    let _ = index.windows_unavailable(windows_unknown(UnknownCause::Forbidden));
    assert_eq!((value("not_listed"), value("forbidden")), (0, 1));
    index.handle_change_window(&watcher::Event::InitDone, &[]);
    assert_eq!(
        (value("not_listed"), value("forbidden"), value("list_failed")),
        (0, 0, 0)
    );
}
