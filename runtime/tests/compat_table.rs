//! The one table of TensorRT compatibility cases
//! (`tether_targets::compat::table::CASES`, also run against engine selection
//! in `tether-targets`) through the runtime's deserialize gate, from the
//! bundle-encoded record (`PlanTarget`, as trtexec and the bundle store it)
//! to the gate's answer. The gate has a library and a GPU by construction,
//! so the cases without one belong to selection only.

use tether_runtime::tensorrt::{CompatError, PlanTarget, check_plan_compatibility};
use tether_targets::compat::table::CASES;

#[test]
fn the_gate_answers_every_case_like_selection() {
    let mut run = 0;
    for c in CASES {
        let (Some(library), Some(gpu)) = (c.library, c.gpu) else {
            continue;
        };
        // The record as the bundle and trtexec encode it.
        let target = PlanTarget {
            tensorrt_version: c.plan.tensorrt.0,
            sm: c.plan.sm.map(|s| (s.major, s.minor)),
            hardware_compat: c.plan.hardware_compat,
            flags: c.plan.flags,
        };
        let got = check_plan_compatibility(&target.record(), &library, gpu);
        assert_eq!(
            got,
            c.want.map_err(|reject| CompatError { reject }),
            "case `{}`",
            c.name
        );
        if let Err(e) = got {
            assert!(!e.to_string().contains('\n'), "{e}");
        }
        run += 1;
    }
    // Every case but the two without a library or a GPU.
    assert_eq!(run, CASES.len() - 2);
}
