//! Helpers the engine's integration tests share.

use ferrox_engine::EngineHandle;

/// Waits until nothing runs or waits (the gauges follow the step that finished).
pub fn wait_idle(h: &EngineHandle) {
    for _ in 0..5000 {
        let s = h.stats();
        if s.running == 0 && s.queue_depth == 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    panic!("engine did not go idle: {:?}", h.stats());
}
