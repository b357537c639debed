use model::data::default_data_dir;
use model::predictor::Predictor;
fn main() {
    let p = Predictor::from_data_dir(&default_data_dir(), "v100").unwrap();
    let c = p.curves("v100").unwrap();
    for s in &c.ladder { println!("{:?}", s); }
    for (k, v) in &c.classes { println!("{k}: {:?}", v); for st in 0..c.ladder.len() { let pr = c.predict(Some(k), st); print!(" ({:.3},{:.0})", pr.time_ratio, pr.power_w); } println!(); }
    println!("generic {:?}", c.generic);
}
