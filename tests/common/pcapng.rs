//! pcapng files written by hand, block by block: sections in either byte
//! order, interfaces with options, and each packet block type, for tests
//! that need what no capture tool writes on request.

/// A pcapng file written block by block, in either byte order.
pub struct Ng {
    pub big: bool,
    pub bytes: Vec<u8>,
}

impl Ng {
    pub fn new() -> Ng {
        Ng {
            big: false,
            bytes: Vec::new(),
        }
    }
    pub fn u16(&self, x: u16) -> [u8; 2] {
        if self.big {
            x.to_be_bytes()
        } else {
            x.to_le_bytes()
        }
    }
    pub fn u32(&self, x: u32) -> [u8; 4] {
        if self.big {
            x.to_be_bytes()
        } else {
            x.to_le_bytes()
        }
    }
    pub fn block(&mut self, ty: u32, body: &[u8]) -> &mut Ng {
        let mut body = body.to_vec();
        while !body.len().is_multiple_of(4) {
            body.push(0);
        }
        let len = 12 + body.len() as u32;
        let (t, l) = (self.u32(ty), self.u32(len));
        self.bytes.extend_from_slice(&t);
        self.bytes.extend_from_slice(&l);
        self.bytes.extend_from_slice(&body);
        self.bytes.extend_from_slice(&l);
        self
    }
    pub fn shb(&mut self, big: bool) -> &mut Ng {
        self.big = big;
        let mut b = self.u32(0x1a2b_3c4d).to_vec();
        b.extend_from_slice(&self.u16(1));
        b.extend_from_slice(&self.u16(0));
        b.extend_from_slice(&[0xff; 8]);
        self.block(0x0a0d_0d0a, &b)
    }
    pub fn idb(&mut self, link: u16, snaplen: u32, options: &[(u16, Vec<u8>)]) -> &mut Ng {
        let mut b = self.u16(link).to_vec();
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&self.u32(snaplen));
        for (code, val) in options {
            b.extend_from_slice(&self.u16(*code));
            b.extend_from_slice(&self.u16(val.len() as u16));
            b.extend_from_slice(val);
            while !b.len().is_multiple_of(4) {
                b.push(0);
            }
        }
        b.extend_from_slice(&[0, 0, 0, 0]);
        self.block(1, &b)
    }
    pub fn epb(&mut self, iface: u32, units: u64, wire: u32, data: &[u8]) -> &mut Ng {
        let mut b = self.u32(iface).to_vec();
        b.extend_from_slice(&self.u32((units >> 32) as u32));
        b.extend_from_slice(&self.u32(units as u32));
        b.extend_from_slice(&self.u32(data.len() as u32));
        b.extend_from_slice(&self.u32(wire));
        b.extend_from_slice(data);
        self.block(6, &b)
    }
    pub fn spb(&mut self, wire: u32, data: &[u8]) -> &mut Ng {
        let mut b = self.u32(wire).to_vec();
        b.extend_from_slice(data);
        self.block(3, &b)
    }
    pub fn opb(&mut self, iface: u16, units: u64, data: &[u8]) -> &mut Ng {
        let mut b = self.u16(iface).to_vec();
        b.extend_from_slice(&self.u16(0));
        b.extend_from_slice(&self.u32((units >> 32) as u32));
        b.extend_from_slice(&self.u32(units as u32));
        b.extend_from_slice(&self.u32(data.len() as u32));
        b.extend_from_slice(&self.u32(data.len() as u32));
        b.extend_from_slice(data);
        self.block(2, &b)
    }
}
