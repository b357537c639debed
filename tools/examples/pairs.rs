use model::data::default_data_dir;
use model::predictor::Predictor;
fn main() {
    let p = Predictor::from_data_dir(&default_data_dir(), "v100").unwrap();
    let fams = ["ResNet-18", "ResNet-50", "Transformer", "A3C", "LM", "Recommendation", "CycleGAN"];
    println!("fallback {}", p.interference.fallback_slowdown());
    for a in fams { for b in fams { let q = p.interference.predict(Some(a), Some(b)); print!("{a}/{b}: {:.2},{:.2} {:?}  ", q.slowdown_a, q.slowdown_b, q.source); } println!(); }
}
