// The heavy stage's window clear: glibc's memset against non-temporal
// stores, on 8 buffers of 512 KiB (the default heavy filter's shards)
// with 11 random byte increments a packet between clears.
//   gcc -O2 -o /tmp/nt_clear benches/scratch/nt_clear.c
//   /tmp/nt_clear MODE WINDOWS PACKETS   # MODE 0 memset, 1 non-temporal, 2 no clear
// e.g. /tmp/nt_clear 0 60 3125 (b15: 60 windows of 3,125 packets a shard).
#include <emmintrin.h>
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define SHARDS 8
#define BYTES (512*1024)
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static uint64_t s=88172645463325252ull; static inline uint64_t rnd(){s^=s<<13;s^=s>>7;s^=s<<17;return s;}
static void nt_clear(uint8_t*p,size_t n){__m128i z=_mm_setzero_si128();for(size_t i=0;i<n;i+=64){_mm_stream_si128((__m128i*)(p+i),z);_mm_stream_si128((__m128i*)(p+i+16),z);_mm_stream_si128((__m128i*)(p+i+32),z);_mm_stream_si128((__m128i*)(p+i+48),z);}_mm_sfence();}
int main(int argc,char**argv){int mode=atoi(argv[1]);int windows=atoi(argv[2]);int pk=atoi(argv[3]);
 uint8_t*b[SHARDS];for(int i=0;i<SHARDS;i++){b[i]=aligned_alloc(4096,BYTES);memset(b[i],0,BYTES);}
 double tc=0,t0=now();uint64_t sum=0;
 for(int w=0;w<windows;w++){
  // packets interleaved across shards in batches of 64
  for(int p=0;p<pk;p+=64) for(int sh=0;sh<SHARDS;sh++) for(int j=0;j<64;j++){uint64_t h=rnd();for(int k=0;k<11;k++){size_t i=(h*(k+1)*0x9e3779b97f4a7c15ull)>>45; b[sh][i & (BYTES-1)]++;}}
  double c0=now();
  for(int sh=0;sh<SHARDS;sh++){ if(mode==0) memset(b[sh],0,BYTES); else if(mode==1) nt_clear(b[sh],BYTES); }
  tc+=now()-c0;
 }
 for(int i=0;i<SHARDS;i++)sum+=b[i][rnd()&(BYTES-1)];
 printf("mode %d total %.3f s clear %.3f s (%.1f us per 512K clear) %lu\n",mode,now()-t0,tc,tc/windows/SHARDS*1e6,sum);}
