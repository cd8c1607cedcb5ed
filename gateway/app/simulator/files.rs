//! Result files the simulator serves itself, under signed-looking URLs that expire after 24 hours.

use sha2::{Digest, Sha256};
use std::sync::OnceLock;

pub const TTL_SECONDS: i64 = 24 * 3600;
const SECRET: &str = "mediagate-simulator-signing";

pub fn signature(path: &str, expires: i64) -> String {
    hex::encode(&Sha256::digest(format!("{SECRET}\n{path}\n{expires}"))[..16])
}

/// `{base}/files/{name}?Expires=..&Signature=..`.
pub fn signed_url(base: &str, name: &str, now_s: i64) -> String {
    let expires = now_s + TTL_SECONDS;
    format!("{base}/files/{name}?Expires={expires}&Signature={}", signature(name, expires))
}

/// A real 64x64 RGB PNG (a gradient), encoded once.
pub fn png() -> &'static [u8] {
    static PNG: OnceLock<Vec<u8>> = OnceLock::new();
    PNG.get_or_init(|| {
        let (w, h) = (64u32, 64u32);
        let mut pixels = Vec::with_capacity((w * h * 3) as usize);
        for y in 0..h {
            for x in 0..w {
                pixels.extend_from_slice(&[(x * 4) as u8, (y * 4) as u8, 160]);
            }
        }
        let mut out = Vec::new();
        {
            let mut encoder = png::Encoder::new(&mut out, w, h);
            encoder.set_color(png::ColorType::Rgb);
            encoder.set_depth(png::BitDepth::Eight);
            if let Ok(mut writer) = encoder.write_header() {
                let _ = writer.write_image_data(&pixels);
            }
        }
        out
    })
}

/// A small MP4 container: an `ftyp` box (isom, mp42) and an `mdat` box.
pub fn mp4() -> Vec<u8> {
    let mut out = Vec::new();
    let ftyp: &[u8] = b"isom\x00\x00\x02\x00isomiso2mp41mp42";
    out.extend_from_slice(&((8 + ftyp.len()) as u32).to_be_bytes());
    out.extend_from_slice(b"ftyp");
    out.extend_from_slice(ftyp);
    let payload = b"mediagate simulated video";
    out.extend_from_slice(&((8 + payload.len()) as u32).to_be_bytes());
    out.extend_from_slice(b"mdat");
    out.extend_from_slice(payload);
    out
}
