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

/// Positions `from..to` of kv head `h` in `layer`, widened run by run (as
/// attention reads them): keys, values.
fn widened(
    s: &KvStore,
    t: &PageTable,
    layer: usize,
    h: usize,
    from: usize,
    to: usize,
) -> (Vec<f32>, Vec<f32>) {
    let (mut k, mut v) = (Vec::new(), Vec::new());
    s.for_each_key_run(t, layer, h, from, to, |_, run| k.extend_from_slice(run));
    s.for_each_value_run(t, layer, h, from, to, |_, run| v.extend_from_slice(run));
    (k, v)
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
        // Widened positions are what position-by-position reads give; runs
        // visit the same values and end at page boundaries.
        for h in 0..p.n_kv_heads {
            let (dk, dv) = (p.head_dim_k, p.head_dim_v);
            let (k, v) = widened(&s, &t, layer, h, 3, 20);
            for (j, pos) in (3..20).enumerate() {
                let (rk, rv) = s.read(&t, layer, pos, h);
                assert_eq!(&k[j * dk..(j + 1) * dk], rk);
                assert_eq!(&v[j * dv..(j + 1) * dv], rv);
            }
            let mut seen = Vec::new();
            s.for_each_key_run(&t, layer, h, 3, 20, |p0, run| {
                let n = run.len() / dk;
                assert!(p0 % 4 == 0 || p0 == 3);
                assert!(n <= 4 - p0 % 4);
                assert_eq!(run, &k[(p0 - 3) * dk..(p0 - 3 + n) * dk]);
                seen.extend(p0..p0 + n);
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
    assert_eq!(widened(&s, &t, 0, 0, 5, 6), (rk, rv));
}

/// A layout of two full layers of 2 kv heads, 64-wide keys and 32-wide values.
fn wide_layout() -> KvLayout {
    use ferrox_models::kv_store::{KvElement, KvPlace, LayerSlot};
    let place = |offset| KvPlace {
        offset,
        n_kv_heads: 2,
        head_dim_k: 64,
        head_dim_v: 32,
    };
    KvLayout {
        layers: vec![LayerSlot::Full(place(0)), LayerSlot::Full(place(192))],
        full_floats: 384,
        window_floats: 0,
        window: 0,
        n_recurrent: 0,
        state_floats: 0,
        element: KvElement::F32,
    }
}

/// q8_0 and q4_0 caches store each head's vector rotated
/// (`kv_store::rotate`), in ggml's blocks as its reference quantizer writes
/// them: runs hold those blocks widened, and `read` rotates them back.
#[test]
fn q8_0_and_q4_0_caches_store_rotated_ggml_blocks_and_read_back_their_exact_values() {
    use ferrox_models::kv_store::{KvElement, rotate_back};
    for element in [KvElement::Q8_0, KvElement::Q4_0] {
        let stored = |x: &[f32]| rotated_blocks(element, x);
        let read = |x: &[f32]| {
            let mut out = stored(x);
            rotate_back(&mut out);
            out
        };
        check_blocks(element, stored, read);
    }
}

/// Rotation keeps dot products and is undone by its inverse.
#[test]
fn a_rotation_keeps_dot_products_and_is_undone() {
    use ferrox_models::kv_store::{rotate, rotate_back};
    let a: Vec<f32> = (0..96)
        .map(|i| (i as f32 * 0.7).sin() * (1 + i % 7) as f32)
        .collect();
    let b: Vec<f32> = (0..96).map(|i| (i as f32 * 1.3).cos()).collect();
    let dot = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f32>();
    let (mut ra, mut rb) = (a.clone(), b.clone());
    rotate(&mut ra);
    rotate(&mut rb);
    assert!(
        (dot(&ra, &rb) - dot(&a, &b)).abs() < 1e-3,
        "{} {}",
        dot(&ra, &rb),
        dot(&a, &b)
    );
    assert_ne!(ra, a);
    rotate_back(&mut ra);
    for (x, y) in ra.iter().zip(&a) {
        assert!((x - y).abs() < 1e-5, "{x} {y}");
    }
}

fn key_of(layer: usize, pos: usize) -> Vec<f32> {
    (0..128)
        .map(|i| ((layer * 7 + pos * 3 + i) as f32 * 0.37).sin() * (1 + i % 5) as f32)
        .collect()
}

fn value_of(pos: usize) -> Vec<f32> {
    (0..64)
        .map(|i| (i as f32 - 30.5) / (pos + 1) as f32)
        .collect()
}

/// `x` as a cache of `element` holds it: rotated, then in ggml's blocks as
/// its reference quantizer writes them, widened back.
fn rotated_blocks(element: ferrox_models::kv_store::KvElement, x: &[f32]) -> Vec<f32> {
    use ferrox_core::kernels::reference::{dequantize, quantize};
    let mut r = x.to_vec();
    ferrox_models::kv_store::rotate(&mut r);
    let bytes = quantize(element.dtype(), &r).unwrap();
    let mut out = vec![0.0; x.len()];
    dequantize(element.dtype(), &bytes, &mut out).unwrap();
    out
}

/// Writes keys and values into a cache of `element` and checks what runs
/// hold against `stored` and every read against `read`.
fn check_blocks(
    element: ferrox_models::kv_store::KvElement,
    stored: impl Fn(&[f32]) -> Vec<f32>,
    read: impl Fn(&[f32]) -> Vec<f32>,
) {
    let mut s = KvStore::new(wide_layout().with_element(element), 4);
    let t = s.fresh_table(8);
    for layer in 0..2 {
        for pos in 0..8 {
            let (k, v) = (key_of(layer, pos), value_of(pos));
            s.write(&t, layer, pos, &k, &v);
            for h in 0..2 {
                let (rk, rv) = s.read(&t, layer, pos, h);
                assert_eq!(
                    rk,
                    read(&k[h * 64..(h + 1) * 64]),
                    "layer {layer} pos {pos}"
                );
                assert_eq!(
                    rv,
                    read(&v[h * 32..(h + 1) * 32]),
                    "layer {layer} pos {pos}"
                );
            }
        }
        let (keys, values) = widened(&s, &t, layer, 1, 2, 7);
        for (j, pos) in (2..7).enumerate() {
            let (k, v) = (key_of(layer, pos), value_of(pos));
            assert_eq!(&keys[j * 64..(j + 1) * 64], stored(&k[64..128]));
            assert_eq!(&values[j * 32..(j + 1) * 32], stored(&v[32..64]));
        }
    }
}

/// Key offsets: a layer's offset is subtracted from each key before it is
/// rotated and quantized (runs hold that), and `read` adds it back; a layer
/// without one stores its keys as they are. Keys with a large common part
/// come back closer with the offset than without it.
#[test]
fn key_offsets_are_subtracted_before_quantizing_and_added_back_by_read() {
    use ferrox_models::kv_store::{KeyOffsets, KvElement, rotate_back};
    let element = KvElement::Q8_0;
    let stored = |x: &[f32]| rotated_blocks(element, x);
    let common: Vec<f32> = (0..128).map(|i| 60.0 * ((i % 9) as f32 - 4.0)).collect();
    let offsets = KeyOffsets::new(vec![Some(common.clone()), None]);
    let layout = wide_layout().with_element(element);
    let mut plain = KvStore::new(layout.clone(), 4);
    let mut s = KvStore::new(layout, 4).with_key_offsets(offsets);
    let t = s.fresh_table(8);
    plain.fresh_table(8);
    let (mut err_with, mut err_without) = (0.0f32, 0.0f32);
    for layer in 0..2 {
        for pos in 0..8 {
            let k: Vec<f32> = key_of(layer, pos)
                .iter()
                .zip(&common)
                .map(|(k, c)| k + c)
                .collect();
            let v = value_of(pos);
            s.write(&t, layer, pos, &k, &v);
            plain.write(&t, layer, pos, &k, &v);
            for h in 0..2 {
                let own = &k[h * 64..(h + 1) * 64];
                let c = &common[h * 64..(h + 1) * 64];
                let mut want = match layer {
                    0 => stored(&own.iter().zip(c).map(|(k, c)| k - c).collect::<Vec<_>>()),
                    _ => stored(own),
                };
                rotate_back(&mut want);
                if layer == 0 {
                    want.iter_mut().zip(c).for_each(|(w, c)| *w += c);
                }
                let (rk, _) = s.read(&t, layer, pos, h);
                assert_eq!(rk, want, "layer {layer} pos {pos} head {h}");
                if layer == 0 {
                    let (pk, _) = plain.read(&t, layer, pos, h);
                    let far = |r: &[f32]| {
                        r.iter()
                            .zip(own)
                            .map(|(a, b)| (a - b).abs())
                            .fold(0.0, f32::max)
                    };
                    err_with = err_with.max(far(&rk));
                    err_without = err_without.max(far(&pk));
                }
            }
        }
        let (keys, _) = widened(&s, &t, layer, 1, 0, 8);
        for (j, pos) in (0..8).enumerate() {
            let k: Vec<f32> = key_of(layer, pos)
                .iter()
                .zip(&common)
                .map(|(k, c)| k + c)
                .collect();
            let want = match layer {
                0 => stored(
                    &k[64..]
                        .iter()
                        .zip(&common[64..])
                        .map(|(k, c)| k - c)
                        .collect::<Vec<_>>(),
                ),
                _ => stored(&k[64..]),
            };
            assert_eq!(&keys[j * 64..(j + 1) * 64], want);
        }
    }
    assert!(
        err_with * 4.0 < err_without,
        "with offsets {err_with}, without {err_without}"
    );
}

/// Offsets pay only on the quantized elements, and are refused elsewhere.
#[test]
#[should_panic(expected = "key offsets are for 8- and 4-bit KV")]
fn key_offsets_on_an_f16_cache_are_refused() {
    use ferrox_models::kv_store::{KeyOffsets, KvElement};
    let _ = KvStore::new(wide_layout().with_element(KvElement::F16), 4)
        .with_key_offsets(KeyOffsets::new(vec![None, None]));
}

/// Every architecture's key offsets: one `[n_kv_heads][head_dim_k]` vector
/// for each attention layer whose softmax a shift of its scores leaves
/// alone, none for recurrent layers, soft-capped scores (Gemma 2) or a sink
/// logit (gpt-oss); and they are the layer's mean stored key, not zero.
#[test]
fn tiny_models_key_offsets_cover_the_shift_invariant_attention_layers() {
    use ferrox_models::decoder::Decoder;
    use ferrox_models::{ActivationPath, Architecture};
    for arch in Architecture::ALL {
        let tiny = TinyModel::new(arch);
        let file = ferrox_gguf::GgufFile::from_bytes(tiny.gguf()).unwrap();
        let m = tiny.load_with(1, ActivationPath::Int16);
        let (hp, layout) = (m.hyper_params(), m.kv_layout());
        let offsets = m.key_offsets().unwrap();
        assert_eq!(offsets.n_layers(), hp.n_layers, "{arch:?}");
        for l in 0..hp.n_layers {
            let sinks = file
                .tensors()
                .any(|t| t.info.name == format!("blk.{l}.attn_sinks.weight"));
            let place = layout.place(l);
            let takes = place.is_some() && hp.attn_softcap.is_none() && !sinks;
            match (offsets.of(l), place) {
                (Some(c), Some(p)) if takes => {
                    assert_eq!(c.len(), p.n_kv_heads * p.head_dim_k, "{arch:?} layer {l}");
                    assert!(
                        c.iter().any(|x| *x != 0.0),
                        "{arch:?} layer {l}: a zero offset"
                    );
                }
                (None, _) if !takes => {}
                (o, _) => panic!("{arch:?} layer {l}: offset {o:?}, expected one: {takes}"),
            }
        }
    }
}

#[test]
fn q8_0_needs_head_dimensions_in_whole_blocks() {
    use ferrox_models::kv_store::KvElement;
    let e = layout().check_element(KvElement::Q8_0).unwrap_err();
    assert!(e.to_string().contains("--kv-type q8_0"), "{e}");
    assert_eq!(wide_layout().check_element(KvElement::Q8_0), Ok(()));
    assert!(layout().check_element(KvElement::Q4_0).is_err());
    assert_eq!(layout().check_element(KvElement::F16), Ok(()));
}
