//! The KV store: fresh tables, coverage, and positions read back as written.

use ferrox_models::HyperParams;
use ferrox_models::kv_store::{KvLayout, KvStore, NO_PAGE, PageTable};
use ferrox_testkit::TinyModel;

fn layout() -> KvLayout {
    let file = ferrox_gguf::GgufFile::from_bytes(
        TinyModel::new(ferrox_models::Architecture::Gemma3).gguf(),
    )
    .unwrap();
    KvLayout::new(&HyperParams::from_metadata(&file.header().metadata).unwrap())
}

#[test]
fn fresh_tables_never_share_a_page() {
    let mut s = KvStore::new(layout(), 4);
    let a = s.fresh_table(9);
    let b = s.fresh_table(1);
    assert_eq!((a.full.len(), b.full.len()), (3, 1));
    assert!(a.full.iter().all(|p| !b.full.contains(p)));
    assert_eq!(a.window, a.full, "a window model gets window pages too");
}

#[test]
fn coverage_names_the_first_position_without_a_page() {
    let s = KvStore::new(layout(), 4);
    let w = s.layout().window;
    let n = w + 12;
    let mut t = PageTable {
        full: (0..n.div_ceil(4) as u32).collect(),
        window: (0..n.div_ceil(4) as u32).collect(),
        state: None,
    };
    assert_eq!(s.check_covers(&t, n - 1, n), Ok(()));
    assert_eq!(s.check_covers(&t, 0, n + 1), Err(n.div_ceil(4) * 4));
    // Slide past the first page: still fine for the last position's window...
    t.window[0] = NO_PAGE;
    assert_eq!(s.check_covers(&t, n - 1, n), Ok(()));
    // ...but not for a query whose window reaches back into it.
    assert!(s.check_covers(&t, 2, 3).is_err());
}

#[test]
fn positions_written_read_back_per_head_in_both_pools() {
    let mut s = KvStore::new(layout(), 4);
    let t = s.fresh_table(20);
    let l = s.layout().clone();
    for layer in 0..l.layers.len() {
        let p = l.place(layer).unwrap();
        let kd = p.n_kv_heads * p.head_dim_k;
        for pos in 0..20 {
            let k: Vec<f32> = (0..kd)
                .map(|i| (layer * 1000 + pos * 10 + i) as f32)
                .collect();
            let v: Vec<f32> = k.iter().map(|x| -x).collect();
            s.write(&t, layer, pos, &k, &v);
        }
        for pos in [0, 5, 19] {
            for h in 0..p.n_kv_heads {
                let (k, v) = s.read(&t, layer, pos, h);
                assert_eq!(k[0], (layer * 1000 + pos * 10 + h * p.head_dim_k) as f32);
                assert_eq!(v[0], -((layer * 1000 + pos * 10 + h * p.head_dim_v) as f32));
            }
        }
        // Runs visit the same values as position-by-position reads, and end at
        // page boundaries.
        for h in 0..p.n_kv_heads {
            let mut seen = Vec::new();
            s.for_each_run(&t, layer, h, 3, 20, |p0, k, v| {
                let n = k.len() / p.head_dim_k;
                assert!(p0 % 4 == 0 || p0 == 3);
                assert!(n <= 4 - p0 % 4);
                for j in 0..n {
                    let (rk, rv) = s.read(&t, layer, p0 + j, h);
                    assert_eq!(&k[j * p.head_dim_k..(j + 1) * p.head_dim_k], rk);
                    assert_eq!(&v[j * p.head_dim_v..(j + 1) * p.head_dim_v], rv);
                    seen.push(p0 + j);
                }
            });
            assert_eq!(seen, (3..20).collect::<Vec<_>>());
        }
    }
}

#[test]
fn an_f16_cache_stores_values_rounded_to_nearest_and_reads_them_back_widened() {
    use ferrox_models::kv_store::KvElement;
    let mut s = KvStore::new(layout().with_element(KvElement::F16), 4);
    let t = s.fresh_table(8);
    let p = s.layout().place(0).unwrap();
    let kd = p.n_kv_heads * p.head_dim_k;
    let vd = p.n_kv_heads * p.head_dim_v;
    // 1/3 rounds to the nearest f16; 2049 to 2048 (ties to even); 65504 is
    // f16's largest; 0.5 is exact.
    let k: Vec<f32> = (0..kd)
        .map(|i| [1.0 / 3.0, 2049.0, 65504.0, 0.5][i % 4])
        .collect();
    let v: Vec<f32> = (0..vd).map(|i| -(i as f32) / 7.0).collect();
    s.write(&t, 0, 5, &k, &v);
    let (rk, rv) = s.read(&t, 0, 5, 0);
    let want_k: Vec<f32> = k[..p.head_dim_k]
        .iter()
        .map(|&x| half::f16::from_f32(x).to_f32())
        .collect();
    assert_eq!(rk, want_k);
    assert_eq!(&rk[..4], &[0.333_251_95, 2048.0, 65504.0, 0.5]);
    assert!(
        rv.iter()
            .zip(&v)
            .all(|(a, b)| (a - b).abs() <= b.abs() / 1024.0)
    );
    s.for_each_run(&t, 0, 0, 5, 6, |_, keys, values| {
        assert_eq!(keys, &rk[..]);
        assert_eq!(values, &rv[..]);
    });
}
