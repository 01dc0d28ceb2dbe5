"""The fault matrix, end to end, in one place.

Every case runs the real agent loop (``agent.runtime.agent.Agent`` in-process, or the
``run`` command as a process where a signal is needed) against the in-repo API server over
real HTTP, on a writable copy of fixtures/sysfs/coral-usb, with a Node seeded with foreign
labels, annotations, taints and an extended resource. Each asserts convergence once the fault
clears (the Node equals a plan computed apart from the agent), the ``Ledger``
(``harness.py``) clean on every version the agent wrote (no foreign item touched, no owned
label or resource flapped; no PATCH removing one), and the foreign parts as seeded.
``test_ledger.py`` proves the ledger catches each violation.

=====================================  ====================================================  =========================
fault                                  test                                                  also covered (narrower)
=====================================  ====================================================  =========================
API down at start (refused, 1 s+)      test_api_faults::test_api_down_at_start               reconcile/test_faults_e2e::test_refused_connections_then_recovery
API down mid-run (+ streams cut)       test_api_faults::test_api_down_mid_run                runtime/test_agent_e2e::test_api_outage_is_retried_and_stop_is_prompt
watch dropped (clean and abrupt)       test_api_faults::test_watch_dropped_cleanly_and_abruptly  runtime/test_node_watch::test_continues_from_last_version_after_a_dropped_watch
410 Gone (compaction)                  test_api_faults::test_410_gone_relists_and_catches_the_missed_change  runtime/test_node_watch::test_410_relists_and_reports_a_change_made_meanwhile; kube/test_reflector::test_410_lists_again_and_a_change_made_meanwhile_arrives
watch answered with junk / HTML page   test_api_faults::test_a_junk_watch_stream_neither_spins_nor_is_taken_as_the_node  kube/test_reflector::test_a_stream_with_nothing_usable_backs_off_like_an_error_and_is_counted; kube/test_reflector::test_junk_does_not_spin_over_a_second
NFD-object watch answered with junk    runtime/test_cluster_objects::test_a_junk_watch_stream_backs_off_and_keeps_the_objects_output
Pod (another kind) under the Node's    test_api_faults::test_a_junk_watch_stream_neither_spins_nor_is_taken_as_the_node  runtime/test_node_watch::test_hostile_stream_lines_are_dropped_and_only_this_node_is_taken
 name; a Node without uid
watch streams that end at once         kube/test_reflector::test_streams_that_end_at_once_are_paced  runtime/test_node_watch::test_clean_ends_reconnect_at_once_from_the_last_version
409 storm (writer every 50 ms)         test_api_faults::test_409_storm_from_a_second_writer_every_50ms
429 + Retry-After (waited >= 1 s)      test_api_faults::test_429_retry_after_is_waited_out   reconcile/test_faults_e2e::test_429_retry_after_is_honoured
500/503 bursts (start and mid-run)     test_api_faults::test_500_and_503_bursts_at_start_and_mid_run  reconcile/test_faults_e2e::test_server_error_burst_is_retried_with_exponential_backoff
5 s slow responses (client times out)  test_api_faults::test_5s_slow_responses_time_out_and_converge  reconcile/test_faults_e2e::test_slow_responses_time_out_and_are_retried
node deleted and recreated (new uid)   test_node_faults::test_node_deleted_and_recreated_gets_everything_again_on_the_new_uid  runtime/test_agent_e2e::test_not_ready_until_the_node_registers
owned label deleted by someone else    test_node_faults::test_owned_label_deleted_by_someone_else_is_restored_and_their_edit_kept  runtime/test_agent_e2e::test_a_deleted_owned_label_and_resource_are_restored
SIGTERM during a patch (process)       test_node_faults::test_sigterm_during_a_patch_exits_0_and_leaves_whole_writes_only  runtime/test_run_subprocess::test_sigterm_during_a_slow_write_still_exits_zero
owned label reverted after each write  test_node_faults::test_a_label_another_writer_reverts_is_rewritten_with_backoff_then_left_alone  reconcile/test_contest (hand clock); bench/contest.py
one ownership annotation lost/garbage  test_node_faults::test_one_part_of_the_ownership_record_deleted_or_damaged_is_rebuilt  reconcile/test_claims_e2e::test_a_missing_or_damaged_record_is_rebuilt_and_removal_works_again
kubelet restart (in place, renamed,    test_kubelet_restarts::test_every_resource_registers_again_after_kubelet_restarts  deviceplugin/test_plugins::test_reregisters_after_kubelet_restart_and_serves_a_fresh_socket
 directory emptied)
label dir replaced by an invalid one   test_host_faults::test_label_dir_replaced_by_an_invalid_one_keeps_the_last_good_rules  runtime/test_agent_e2e::test_a_rule_edit_propagates_and_a_broken_edit_keeps_the_last_good_rules
sysfs devices vanishing mid-scan       test_host_faults::test_sysfs_devices_vanishing_mid_scan  fuzz/ (whole-host chaos)
device file unreadable (EISDIR, FIFO)  test_unreadable_host::test_run_keeps_the_coral_while_it_cannot_be_read  test_unreadable_host::test_apply_keeps_the_coral_while_its_vendor_file_cannot_be_read
out of descriptors (EMFILE)            test_unreadable_host::test_apply_out_of_descriptors_leaves_the_node_as_it_is  test_misuse_matrix::test_apply_on_a_host_it_cannot_read_leaves_the_node_as_it_was
/proc/cpuinfo incomplete (empty, cut  test_unreadable_host::test_run_holds_the_cpu_labels_while_cpuinfo_is_incomplete  test_misuse_matrix::test_apply_on_a_host_it_cannot_read_leaves_the_node_as_it_was; sources/test_cpu::test_incomplete_cpuinfo_is_a_read_failure; fuzz/test_fuzz_cpu::test_a_cut_cpuinfo_never_decides_other_labels
 mid-line, fewer processors)
/proc/swaps, os-release, kernel        test_misuse_matrix::test_apply_on_a_host_it_cannot_read_leaves_the_node_as_it_was  sources/test_memory, test_kernel, test_system (every shape, file by file)
 release found empty
2xx answer that is not the Node       test_node_answers::test_a_get_answered_with_something_else_is_retried_and_writes_nothing
 (Status, Pod, other Node, no uid)     test_node_answers::test_a_patch_answered_with_something_else_is_retried_and_counts_no_revert
idle-client flood on the metrics port  test_misuse_matrix::test_a_flood_of_idle_clients_on_the_metrics_port_neither_strips_the_node_nor_kills_the_agent
NodeFeatureRule taints, NoExecute      runtime/test_hostile_objects::test_taints_from_an_object_need_enable_taints
>1,000 objects named first, restart    runtime/test_hostile_objects::test_more_objects_than_the_bound_named_first_keep_the_legitimate_label_after_a_restart
objects created/deleted while bounded  runtime/test_hostile_objects::test_deletions_while_bounded_cost_one_list_per_pause
one object of 10,000 rules (1.4 MiB)   runtime/test_hostile_objects::test_an_object_with_10000_rules_is_refused_before_it_is_parsed  bench/hostile_objects.py
ownership record past 256 KiB          reconcile/test_annotation_budget::test_a_record_over_the_annotation_budget_is_not_sent
placement label removed while gated    placement/test_promises::test_a_gated_pod_whose_label_changes_is_released_without_affinity[None-Warning]  test_misuse_matrix::test_placement_releases_gated_pods_whatever_their_labels_and_cuts_a_silent_registry
placement opt-out set while gated      placement/test_promises::test_a_gated_pod_whose_label_changes_is_released_without_affinity[disabled-Normal]  (the same misuse case)
placement label changed, no controller placement/test_promises::test_a_label_changed_while_no_controller_ran_is_found_by_the_sweep  (the same misuse case)
gated pod deleted                      placement/test_promises::test_a_gated_pod_deleted_costs_one_read_and_no_write
registry accepts, never answers        placement/test_promises::test_a_hanging_registry_is_cut_at_the_retry_window  images/test_resolve_failures::test_a_silent_registry_times_out_within_the_bound
 (retry window; hold: hard deadline)   placement/test_promises::test_hold_against_a_hanging_registry_is_cut_at_the_hard_deadline
API holds a namespace read 10 s        placement/test_promises::test_a_namespace_read_that_hangs_is_cut_at_the_retry_window
=====================================  ====================================================  =========================

The placement rows run the placement controller (in-process, and as the ``placement``
command in the misuse case) against the in-repo API server, with a socket that accepts and
never answers as the registry; they assert the gate released, the Event and outcome, and the
registry requests counted. The ownership-record case runs the ``apply`` command as a process, the damage shows across separate runs;
the kubelet restarts run on the edge-ai host with the kubelet stand-in (``tests/deviceplugin``)
and check registration, not Node writes. The narrower tests check one component or the final state only; the cases here add the
whole loop, the foreign seed and the per-write ledger. Backoffs are shrunk (50-200 ms) so the
whole matrix runs in well under a minute; the 5 s slow responses and the 1 s Retry-After are
real waits.
"""
