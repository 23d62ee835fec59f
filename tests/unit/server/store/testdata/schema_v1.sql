PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
CREATE TABLE schema_version(version INTEGER NOT NULL);
INSERT INTO schema_version VALUES(1);
CREATE TABLE sweeps(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  spec_yaml TEXT NOT NULL DEFAULT '',
  priority INTEGER NOT NULL DEFAULT 0,
  max_attempts INTEGER NOT NULL DEFAULT 3,
  gpus INTEGER NOT NULL DEFAULT 0,
  cpu_slots INTEGER NOT NULL DEFAULT 0,
  axes_json TEXT NOT NULL DEFAULT '[]',
  created_at REAL NOT NULL);
INSERT INTO sweeps VALUES(1,'tiny-v1',replace('name: tiny-v1\nbase:\n  seed: 0\n  data:      {corpus: brown, val_fraction: 0.05, eval_batches: 1}\n  model:     {seq_len: 32, layers: 1, d_model: 32, heads: 2, mlp: gelu, tie_embeddings: true}\n  attention: {kind: fpa}\n  optimizer: {kind: adamw, lr: 0.003}\n  train:     {steps: 12, tokens_per_step: 256, micro_batch: 8, warmup: 2, eval_every: 6, checkpoint_every: 6, threads: 1}\n  device: cpu\ngrid:\n  optimizer.lr: [0.003, 0.01]\nseeds: [0, 1]\norder: grid\nresources: {gpus: 0}\n','\n',char(10)),0,3,0,1,'["optimizer.lr","seed"]',1796248456.3731472491);
CREATE TABLE trials(
  id INTEGER PRIMARY KEY,
  sweep_id INTEGER NOT NULL REFERENCES sweeps(id),
  config_hash TEXT NOT NULL,
  config_json TEXT NOT NULL,
  axes_json TEXT NOT NULL DEFAULT '{}',
  state TEXT NOT NULL DEFAULT 'queued'
    CHECK(state IN ('queued','running','succeeded','failed','diverged','canceled')),
  priority INTEGER NOT NULL DEFAULT 0,
  order_key INTEGER NOT NULL DEFAULT 0,
  gpus INTEGER NOT NULL DEFAULT 0,
  cpu_slots INTEGER NOT NULL DEFAULT 0,
  attempts INTEGER NOT NULL DEFAULT 0,
  max_attempts INTEGER NOT NULL DEFAULT 3,
  total_steps INTEGER NOT NULL DEFAULT 0,
  checkpoint_path TEXT NOT NULL DEFAULT '',
  checkpoint_step INTEGER NOT NULL DEFAULT 0,
  reason TEXT NOT NULL DEFAULT '',
  created_at REAL NOT NULL,
  started_at REAL,
  finished_at REAL,
  UNIQUE(sweep_id, config_hash));
INSERT INTO trials VALUES(1,1,'93f27cf9b691d800','{"attention":{"block_kv":64,"block_q":128,"dq_correction":true,"int8_dp":false,"kind":"fpa","qk_norm":true,"smooth_k":true,"smooth_q":false},"data":{"corpus":"brown","eval_batches":1,"val_fraction":0.05,"vocab_size":0},"device":"cpu","gpus":1,"model":{"d_model":32,"heads":2,"init_std":0.02,"layers":1,"mlp":"gelu","seq_len":32,"tie_embeddings":true},"name":"tiny-v1","optimizer":{"beta1":0.9,"beta2":0.95,"eps":1e-08,"family":"rms","kind":"adamw","lr":0.003,"lr_vector":0.0003,"momentum":0.9,"momentum_kind":"sum","nesterov":false,"newton_iters":15,"ns_steps":5,"p":0.5,"p_end":0.5,"p_schedule":"constant","psi_method":"auto","spectral_embeddings":false,"state_bits":32,"state_quant":"dynamic","tf32":false,"weight_decay":0.0},"seed":0,"train":{"checkpoint_every":6,"decay_fraction":0.2,"diagnostics_every":50,"eval_every":6,"grad_clip":1.0,"max_loss":20.0,"micro_batch":8,"min_lr_ratio":0.0,"peak_tflops":0.0,"schedule":"cosine","steps":12,"threads":1,"tokens_per_step":256,"warmup":2}}','{"optimizer.lr":"0.003","seed":"0"}','succeeded',0,0,0,1,1,3,12,'/tmp/v1/wk/trials/1/attempt-1/checkpoints/step_00000012.ckpt',12,'',1796248456.3731472491,1796248456.3740718365,1796248456.7697100639);
INSERT INTO trials VALUES(2,1,'bd5aec250c8e97f0','{"attention":{"block_kv":64,"block_q":128,"dq_correction":true,"int8_dp":false,"kind":"fpa","qk_norm":true,"smooth_k":true,"smooth_q":false},"data":{"corpus":"brown","eval_batches":1,"val_fraction":0.05,"vocab_size":0},"device":"cpu","gpus":1,"model":{"d_model":32,"heads":2,"init_std":0.02,"layers":1,"mlp":"gelu","seq_len":32,"tie_embeddings":true},"name":"tiny-v1","optimizer":{"beta1":0.9,"beta2":0.95,"eps":1e-08,"family":"rms","kind":"adamw","lr":0.01,"lr_vector":0.0003,"momentum":0.9,"momentum_kind":"sum","nesterov":false,"newton_iters":15,"ns_steps":5,"p":0.5,"p_end":0.5,"p_schedule":"constant","psi_method":"auto","spectral_embeddings":false,"state_bits":32,"state_quant":"dynamic","tf32":false,"weight_decay":0.0},"seed":0,"train":{"checkpoint_every":6,"decay_fraction":0.2,"diagnostics_every":50,"eval_every":6,"grad_clip":1.0,"max_loss":20.0,"micro_batch":8,"min_lr_ratio":0.0,"peak_tflops":0.0,"schedule":"cosine","steps":12,"threads":1,"tokens_per_step":256,"warmup":2}}','{"optimizer.lr":"0.01","seed":"0"}','succeeded',0,1,0,1,1,3,12,'/tmp/v1/wk/trials/2/attempt-1/checkpoints/step_00000012.ckpt',12,'',1796248456.3731472491,1796248456.3740730285,1796248456.7609710693);
INSERT INTO trials VALUES(3,1,'213e1b6343f4c203','{"attention":{"block_kv":64,"block_q":128,"dq_correction":true,"int8_dp":false,"kind":"fpa","qk_norm":true,"smooth_k":true,"smooth_q":false},"data":{"corpus":"brown","eval_batches":1,"val_fraction":0.05,"vocab_size":0},"device":"cpu","gpus":1,"model":{"d_model":32,"heads":2,"init_std":0.02,"layers":1,"mlp":"gelu","seq_len":32,"tie_embeddings":true},"name":"tiny-v1","optimizer":{"beta1":0.9,"beta2":0.95,"eps":1e-08,"family":"rms","kind":"adamw","lr":0.003,"lr_vector":0.0003,"momentum":0.9,"momentum_kind":"sum","nesterov":false,"newton_iters":15,"ns_steps":5,"p":0.5,"p_end":0.5,"p_schedule":"constant","psi_method":"auto","spectral_embeddings":false,"state_bits":32,"state_quant":"dynamic","tf32":false,"weight_decay":0.0},"seed":1,"train":{"checkpoint_every":6,"decay_fraction":0.2,"diagnostics_every":50,"eval_every":6,"grad_clip":1.0,"max_loss":20.0,"micro_batch":8,"min_lr_ratio":0.0,"peak_tflops":0.0,"schedule":"cosine","steps":12,"threads":1,"tokens_per_step":256,"warmup":2}}','{"optimizer.lr":"0.003","seed":"1"}','succeeded',0,2,0,1,1,3,12,'/tmp/v1/wk/trials/3/attempt-1/checkpoints/step_00000012.ckpt',12,'',1796248456.3731472491,1796248456.7609913349,1796248457.0786974429);
INSERT INTO trials VALUES(4,1,'6512d1ba9f43a273','{"attention":{"block_kv":64,"block_q":128,"dq_correction":true,"int8_dp":false,"kind":"fpa","qk_norm":true,"smooth_k":true,"smooth_q":false},"data":{"corpus":"brown","eval_batches":1,"val_fraction":0.05,"vocab_size":0},"device":"cpu","gpus":1,"model":{"d_model":32,"heads":2,"init_std":0.02,"layers":1,"mlp":"gelu","seq_len":32,"tie_embeddings":true},"name":"tiny-v1","optimizer":{"beta1":0.9,"beta2":0.95,"eps":1e-08,"family":"rms","kind":"adamw","lr":0.01,"lr_vector":0.0003,"momentum":0.9,"momentum_kind":"sum","nesterov":false,"newton_iters":15,"ns_steps":5,"p":0.5,"p_end":0.5,"p_schedule":"constant","psi_method":"auto","spectral_embeddings":false,"state_bits":32,"state_quant":"dynamic","tf32":false,"weight_decay":0.0},"seed":1,"train":{"checkpoint_every":6,"decay_fraction":0.2,"diagnostics_every":50,"eval_every":6,"grad_clip":1.0,"max_loss":20.0,"micro_batch":8,"min_lr_ratio":0.0,"peak_tflops":0.0,"schedule":"cosine","steps":12,"threads":1,"tokens_per_step":256,"warmup":2}}','{"optimizer.lr":"0.01","seed":"1"}','succeeded',0,3,0,1,1,3,12,'/tmp/v1/wk/trials/4/attempt-1/checkpoints/step_00000012.ckpt',12,'',1796248456.3731472491,1796248456.7697348594,1796248457.1084785461);
CREATE TABLE attempts(
  trial_id INTEGER NOT NULL REFERENCES trials(id),
  attempt INTEGER NOT NULL,
  worker_id TEXT NOT NULL DEFAULT '',
  gpus_json TEXT NOT NULL DEFAULT '[]',
  cpu_slots INTEGER NOT NULL DEFAULT 0,
  state TEXT NOT NULL DEFAULT 'running'
    CHECK(state IN ('running','succeeded','failed','diverged','lost','canceled')),
  started_at REAL,
  ended_at REAL,
  exit_code INTEGER NOT NULL DEFAULT 0,
  reason TEXT NOT NULL DEFAULT '',
  log_tail TEXT NOT NULL DEFAULT '',
  checkpoint_path TEXT NOT NULL DEFAULT '',
  checkpoint_step INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY(trial_id, attempt));
INSERT INTO attempts VALUES(1,1,'vm-81a6d7','[]',1,'succeeded',1796248456.3740718365,1796248456.7697100639,0,'','','/tmp/v1/wk/trials/1/attempt-1/checkpoints/step_00000012.ckpt',12);
INSERT INTO attempts VALUES(2,1,'vm-81a6d7','[]',1,'succeeded',1796248456.3740730285,1796248456.7609710693,0,'','','/tmp/v1/wk/trials/2/attempt-1/checkpoints/step_00000012.ckpt',12);
INSERT INTO attempts VALUES(3,1,'vm-81a6d7','[]',1,'succeeded',1796248456.7609913349,1796248457.0786974429,0,'','','/tmp/v1/wk/trials/3/attempt-1/checkpoints/step_00000012.ckpt',12);
INSERT INTO attempts VALUES(4,1,'vm-81a6d7','[]',1,'succeeded',1796248456.7697348594,1796248457.1084785461,0,'','','/tmp/v1/wk/trials/4/attempt-1/checkpoints/step_00000012.ckpt',12);
CREATE TABLE metrics(
  trial_id INTEGER NOT NULL,
  attempt INTEGER NOT NULL,
  step INTEGER NOT NULL,
  name TEXT NOT NULL,
  value REAL,
  PRIMARY KEY(trial_id, name, step, attempt)) WITHOUT ROWID;
INSERT INTO metrics VALUES(1,1,0,'accumulation_steps',1.0);
INSERT INTO metrics VALUES(1,1,12,'best_val_loss',4.6466479301452636718);
INSERT INTO metrics VALUES(1,1,12,'elapsed_s',0.040676988999999996732);
INSERT INTO metrics VALUES(1,1,12,'final_train_loss',4.6914243698120117187);
INSERT INTO metrics VALUES(1,1,12,'final_val_loss',4.6466479301452636718);
INSERT INTO metrics VALUES(1,1,0,'flops_per_token',129024.0);
INSERT INTO metrics VALUES(1,1,1,'grad_norm',0.96819055588420432911);
INSERT INTO metrics VALUES(1,1,2,'grad_norm',1.5525488380947611855);
INSERT INTO metrics VALUES(1,1,3,'grad_norm',1.6012089815708903106);
INSERT INTO metrics VALUES(1,1,4,'grad_norm',1.5217782816876641582);
INSERT INTO metrics VALUES(1,1,5,'grad_norm',1.493303228385747472);
INSERT INTO metrics VALUES(1,1,6,'grad_norm',1.4659080060755456109);
INSERT INTO metrics VALUES(1,1,7,'grad_norm',1.3350762963691071849);
INSERT INTO metrics VALUES(1,1,8,'grad_norm',1.4057324353170583819);
INSERT INTO metrics VALUES(1,1,9,'grad_norm',1.679149748362614547);
INSERT INTO metrics VALUES(1,1,10,'grad_norm',2.9171927467595333283);
INSERT INTO metrics VALUES(1,1,11,'grad_norm',1.3784076732990502289);
INSERT INTO metrics VALUES(1,1,12,'grad_norm',1.3101027603207839877);
INSERT INTO metrics VALUES(1,1,1,'loss',5.5444250106811523437);
INSERT INTO metrics VALUES(1,1,2,'loss',5.4609026908874511718);
INSERT INTO metrics VALUES(1,1,3,'loss',5.2719712257385253906);
INSERT INTO metrics VALUES(1,1,4,'loss',5.1514539718627929687);
INSERT INTO metrics VALUES(1,1,5,'loss',5.0182666778564453125);
INSERT INTO metrics VALUES(1,1,6,'loss',4.92522430419921875);
INSERT INTO metrics VALUES(1,1,7,'loss',4.8369226455688476562);
INSERT INTO metrics VALUES(1,1,8,'loss',4.7910604476928710937);
INSERT INTO metrics VALUES(1,1,9,'loss',4.7555189132690429687);
INSERT INTO metrics VALUES(1,1,10,'loss',4.7069144248962402343);
INSERT INTO metrics VALUES(1,1,11,'loss',4.6887989044189453125);
INSERT INTO metrics VALUES(1,1,12,'loss',4.6914243698120117187);
INSERT INTO metrics VALUES(1,1,1,'lr',0.0015000000000000000312);
INSERT INTO metrics VALUES(1,1,2,'lr',0.0030000000000000000624);
INSERT INTO metrics VALUES(1,1,3,'lr',0.0029265847744427307339);
INSERT INTO metrics VALUES(1,1,4,'lr',0.0027135254915624210277);
INSERT INTO metrics VALUES(1,1,5,'lr',0.0023816778784387098062);
INSERT INTO metrics VALUES(1,1,6,'lr',0.0019635254915624212289);
INSERT INTO metrics VALUES(1,1,7,'lr',0.0015000000000000000312);
INSERT INTO metrics VALUES(1,1,8,'lr',0.0010364745084375790503);
INSERT INTO metrics VALUES(1,1,9,'lr',0.00061832212156129047302);
INSERT INTO metrics VALUES(1,1,10,'lr',0.00028647450843757898053);
INSERT INTO metrics VALUES(1,1,11,'lr',7.3415225557269707997e-05);
INSERT INTO metrics VALUES(1,1,12,'lr',0.0);
INSERT INTO metrics VALUES(1,1,1,'lr_vector',0.00014999999999999998685);
INSERT INTO metrics VALUES(1,1,2,'lr_vector',0.00029999999999999997371);
INSERT INTO metrics VALUES(1,1,3,'lr_vector',0.00029265847744427303002);
INSERT INTO metrics VALUES(1,1,4,'lr_vector',0.00027135254915624211361);
INSERT INTO metrics VALUES(1,1,5,'lr_vector',0.00023816778784387093725);
INSERT INTO metrics VALUES(1,1,6,'lr_vector',0.00019635254915624210663);
INSERT INTO metrics VALUES(1,1,7,'lr_vector',0.00014999999999999998685);
INSERT INTO metrics VALUES(1,1,8,'lr_vector',0.00010364745084375789419);
INSERT INTO metrics VALUES(1,1,9,'lr_vector',6.183221215612903646e-05);
INSERT INTO metrics VALUES(1,1,10,'lr_vector',2.8647450843757897376e-05);
INSERT INTO metrics VALUES(1,1,11,'lr_vector',7.3415225557269699532e-06);
INSERT INTO metrics VALUES(1,1,12,'lr_vector',0.0);
INSERT INTO metrics VALUES(1,1,1,'mfu',0.033292263775486434507);
INSERT INTO metrics VALUES(1,1,2,'mfu',0.081344525446652202194);
INSERT INTO metrics VALUES(1,1,3,'mfu',0.081638227187647793847);
INSERT INTO metrics VALUES(1,1,4,'mfu',0.08233649816324599413);
INSERT INTO metrics VALUES(1,1,5,'mfu',0.08236177561251259438);
INSERT INTO metrics VALUES(1,1,6,'mfu',0.083655776994681893543);
INSERT INTO metrics VALUES(1,1,7,'mfu',0.077020374551085457603);
INSERT INTO metrics VALUES(1,1,8,'mfu',0.080715376124619930831);
INSERT INTO metrics VALUES(1,1,9,'mfu',0.083049245727334630728);
INSERT INTO metrics VALUES(1,1,10,'mfu',0.07899995225575090485);
INSERT INTO metrics VALUES(1,1,11,'mfu',0.085316633931194596485);
INSERT INTO metrics VALUES(1,1,12,'mfu',0.085502200999703834027);
INSERT INTO metrics VALUES(1,1,0,'optimizer_state_bytes',164864.0);
INSERT INTO metrics VALUES(1,1,0,'optimizer_state_bytes_fp32',164864.0);
INSERT INTO metrics VALUES(1,1,0,'optimizer_state_saved',0.0);
INSERT INTO metrics VALUES(1,1,0,'params',20608.0);
INSERT INTO metrics VALUES(1,1,0,'peak_flops',166152704000.0);
INSERT INTO metrics VALUES(1,1,0,'resumed_from_step',0.0);
INSERT INTO metrics VALUES(1,1,0,'spectral_tensors',0.0);
INSERT INTO metrics VALUES(1,1,1,'step_time_s',0.0059711740000000000996);
INSERT INTO metrics VALUES(1,1,2,'step_time_s',0.0024438509999999999226);
INSERT INTO metrics VALUES(1,1,3,'step_time_s',0.0024350589999999998347);
INSERT INTO metrics VALUES(1,1,4,'step_time_s',0.002414407999999999832);
INSERT INTO metrics VALUES(1,1,5,'step_time_s',0.0024136669999999999826);
INSERT INTO metrics VALUES(1,1,6,'step_time_s',0.0023763320000000000969);
INSERT INTO metrics VALUES(1,1,7,'step_time_s',0.0025810559999999999752);
INSERT INTO metrics VALUES(1,1,8,'step_time_s',0.0024629000000000000718);
INSERT INTO metrics VALUES(1,1,9,'step_time_s',0.0023936869999999998114);
INSERT INTO metrics VALUES(1,1,10,'step_time_s',0.0025163799999999999189);
INSERT INTO metrics VALUES(1,1,11,'step_time_s',0.0023300719999999998724);
INSERT INTO metrics VALUES(1,1,12,'step_time_s',0.0023250150000000001544);
INSERT INTO metrics VALUES(1,1,0,'threads',1.0);
INSERT INTO metrics VALUES(1,1,1,'tokens',256.0);
INSERT INTO metrics VALUES(1,1,2,'tokens',512.0);
INSERT INTO metrics VALUES(1,1,3,'tokens',768.0);
INSERT INTO metrics VALUES(1,1,4,'tokens',1024.0);
INSERT INTO metrics VALUES(1,1,5,'tokens',1280.0);
INSERT INTO metrics VALUES(1,1,6,'tokens',1536.0);
INSERT INTO metrics VALUES(1,1,7,'tokens',1792.0);
INSERT INTO metrics VALUES(1,1,8,'tokens',2048.0);
INSERT INTO metrics VALUES(1,1,9,'tokens',2304.0);
INSERT INTO metrics VALUES(1,1,10,'tokens',2560.0);
INSERT INTO metrics VALUES(1,1,11,'tokens',2816.0);
INSERT INTO metrics VALUES(1,1,12,'tokens',3072.0);
INSERT INTO metrics VALUES(1,1,1,'tokens_per_s',42872.641125514011945);
INSERT INTO metrics VALUES(1,1,2,'tokens_per_s',104752.7038268699689);
INSERT INTO metrics VALUES(1,1,3,'tokens_per_s',105130.92290576943196);
INSERT INTO metrics VALUES(1,1,4,'tokens_per_s',106030.13243826229882);
INSERT INTO metrics VALUES(1,1,5,'tokens_per_s',106062.68387478472141);
INSERT INTO metrics VALUES(1,1,6,'tokens_per_s',107729.05469437771535);
INSERT INTO metrics VALUES(1,1,7,'tokens_per_s',99184.209873788087858);
INSERT INTO metrics VALUES(1,1,8,'tokens_per_s',103942.50680092573747);
INSERT INTO metrics VALUES(1,1,9,'tokens_per_s',106947.98442737084405);
INSERT INTO metrics VALUES(1,1,10,'tokens_per_s',101733.44248483933915);
INSERT INTO metrics VALUES(1,1,11,'tokens_per_s',109867.84957718045916);
INSERT INTO metrics VALUES(1,1,12,'tokens_per_s',110106.81651516226702);
INSERT INTO metrics VALUES(1,1,0,'tokens_per_step',256.0);
INSERT INTO metrics VALUES(1,1,0,'train_tokens',5661500.0);
INSERT INTO metrics VALUES(1,1,0,'unigram_entropy',3.0766135342514502326);
INSERT INTO metrics VALUES(1,1,1,'update_rms_adamw',0.001495306914947623373);
INSERT INTO metrics VALUES(1,1,2,'update_rms_adamw',0.002500556629604392192);
INSERT INTO metrics VALUES(1,1,3,'update_rms_adamw',0.0022357991623339432823);
INSERT INTO metrics VALUES(1,1,4,'update_rms_adamw',0.0019733961840015436933);
INSERT INTO metrics VALUES(1,1,5,'update_rms_adamw',0.0016682603522811235118);
INSERT INTO metrics VALUES(1,1,6,'update_rms_adamw',0.0013352575233114471944);
INSERT INTO metrics VALUES(1,1,7,'update_rms_adamw',0.00099782261568431948779);
INSERT INTO metrics VALUES(1,1,8,'update_rms_adamw',0.00068704318793918410079);
INSERT INTO metrics VALUES(1,1,9,'update_rms_adamw',0.00040501036381188727309);
INSERT INTO metrics VALUES(1,1,10,'update_rms_adamw',0.00018113563987260750207);
INSERT INTO metrics VALUES(1,1,11,'update_rms_adamw',4.6167560273713721943e-05);
INSERT INTO metrics VALUES(1,1,12,'update_rms_adamw',0.0);
INSERT INTO metrics VALUES(1,1,6,'val_bpb',6.924485188963402038);
INSERT INTO metrics VALUES(1,1,12,'val_bpb',6.7036959255775387944);
INSERT INTO metrics VALUES(1,1,6,'val_loss',4.7996873855590820312);
INSERT INTO metrics VALUES(1,1,12,'val_loss',4.6466479301452636718);
INSERT INTO metrics VALUES(1,1,0,'val_tokens',297973.0);
INSERT INTO metrics VALUES(1,1,0,'vocab_size',256.0);
INSERT INTO metrics VALUES(2,1,0,'accumulation_steps',1.0);
INSERT INTO metrics VALUES(2,1,12,'best_val_loss',3.4524304866790771484);
INSERT INTO metrics VALUES(2,1,12,'elapsed_s',0.047684613000000000693);
INSERT INTO metrics VALUES(2,1,12,'final_train_loss',3.560148477554321289);
INSERT INTO metrics VALUES(2,1,12,'final_val_loss',3.4524304866790771484);
INSERT INTO metrics VALUES(2,1,0,'flops_per_token',129024.0);
INSERT INTO metrics VALUES(2,1,1,'grad_norm',0.96819055588420432911);
INSERT INTO metrics VALUES(2,1,2,'grad_norm',1.7163024960327426526);
INSERT INTO metrics VALUES(2,1,3,'grad_norm',1.4907985893261155307);
INSERT INTO metrics VALUES(2,1,4,'grad_norm',1.9346057997890497848);
INSERT INTO metrics VALUES(2,1,5,'grad_norm',1.3070163692197500626);
INSERT INTO metrics VALUES(2,1,6,'grad_norm',1.1676515106133547039);
INSERT INTO metrics VALUES(2,1,7,'grad_norm',1.0181224034786935384);
INSERT INTO metrics VALUES(2,1,8,'grad_norm',5.0461323703567808607);
INSERT INTO metrics VALUES(2,1,9,'grad_norm',0.96361178890382448436);
INSERT INTO metrics VALUES(2,1,10,'grad_norm',1.9275718003321591353);
INSERT INTO metrics VALUES(2,1,11,'grad_norm',0.94914119169184685276);
INSERT INTO metrics VALUES(2,1,12,'grad_norm',0.83221568528023903699);
INSERT INTO metrics VALUES(2,1,1,'loss',5.5444250106811523437);
INSERT INTO metrics VALUES(2,1,2,'loss',5.3040771484375);
INSERT INTO metrics VALUES(2,1,3,'loss',4.8599557876586914062);
INSERT INTO metrics VALUES(2,1,4,'loss',4.5316648483276367187);
INSERT INTO metrics VALUES(2,1,5,'loss',4.2073230743408203125);
INSERT INTO metrics VALUES(2,1,6,'loss',3.983001708984375);
INSERT INTO metrics VALUES(2,1,7,'loss',3.7888193130493164062);
INSERT INTO metrics VALUES(2,1,8,'loss',3.7814679145812988281);
INSERT INTO metrics VALUES(2,1,9,'loss',3.6963205337524414062);
INSERT INTO metrics VALUES(2,1,10,'loss',3.6416072845458984375);
INSERT INTO metrics VALUES(2,1,11,'loss',3.5298912525177001953);
INSERT INTO metrics VALUES(2,1,12,'loss',3.560148477554321289);
INSERT INTO metrics VALUES(2,1,1,'lr',0.005000000000000000104);
INSERT INTO metrics VALUES(2,1,2,'lr',0.010000000000000000208);
INSERT INTO metrics VALUES(2,1,3,'lr',0.009755282581475769113);
INSERT INTO metrics VALUES(2,1,4,'lr',0.0090450849718747370481);
INSERT INTO metrics VALUES(2,1,5,'lr',0.00793892626146236631);
INSERT INTO metrics VALUES(2,1,6,'lr',0.0065450849718747374297);
INSERT INTO metrics VALUES(2,1,7,'lr',0.005000000000000000104);
INSERT INTO metrics VALUES(2,1,8,'lr',0.003454915028125263212);
INSERT INTO metrics VALUES(2,1,9,'lr',0.0020610737385376347655);
INSERT INTO metrics VALUES(2,1,10,'lr',0.00095491502812526326843);
INSERT INTO metrics VALUES(2,1,11,'lr',0.00024471741852423234192);
INSERT INTO metrics VALUES(2,1,12,'lr',0.0);
INSERT INTO metrics VALUES(2,1,1,'lr_vector',0.00014999999999999998685);
INSERT INTO metrics VALUES(2,1,2,'lr_vector',0.00029999999999999997371);
INSERT INTO metrics VALUES(2,1,3,'lr_vector',0.00029265847744427303002);
INSERT INTO metrics VALUES(2,1,4,'lr_vector',0.00027135254915624211361);
INSERT INTO metrics VALUES(2,1,5,'lr_vector',0.00023816778784387093725);
INSERT INTO metrics VALUES(2,1,6,'lr_vector',0.00019635254915624210663);
INSERT INTO metrics VALUES(2,1,7,'lr_vector',0.00014999999999999998685);
INSERT INTO metrics VALUES(2,1,8,'lr_vector',0.00010364745084375789419);
INSERT INTO metrics VALUES(2,1,9,'lr_vector',6.183221215612903646e-05);
INSERT INTO metrics VALUES(2,1,10,'lr_vector',2.8647450843757897376e-05);
INSERT INTO metrics VALUES(2,1,11,'lr_vector',7.3415225557269699532e-06);
INSERT INTO metrics VALUES(2,1,12,'lr_vector',0.0);
INSERT INTO metrics VALUES(2,1,1,'mfu',0.031524958821610105097);
INSERT INTO metrics VALUES(2,1,2,'mfu',0.086111272284282669442);
INSERT INTO metrics VALUES(2,1,3,'mfu',0.089765108864904519236);
INSERT INTO metrics VALUES(2,1,4,'mfu',0.083223014740439818504);
INSERT INTO metrics VALUES(2,1,5,'mfu',0.08603997512958391769);
INSERT INTO metrics VALUES(2,1,6,'mfu',0.084532537247686834191);
INSERT INTO metrics VALUES(2,1,7,'mfu',0.039655279691470549097);
INSERT INTO metrics VALUES(2,1,8,'mfu',0.08566786130918403741);
INSERT INTO metrics VALUES(2,1,9,'mfu',0.087860746104408304901);
INSERT INTO metrics VALUES(2,1,10,'mfu',0.090111500473837133351);
INSERT INTO metrics VALUES(2,1,11,'mfu',0.081537304197752250023);
INSERT INTO metrics VALUES(2,1,12,'mfu',0.084598800795340989289);
INSERT INTO metrics VALUES(2,1,0,'optimizer_state_bytes',164864.0);
INSERT INTO metrics VALUES(2,1,0,'optimizer_state_bytes_fp32',164864.0);
INSERT INTO metrics VALUES(2,1,0,'optimizer_state_saved',0.0);
INSERT INTO metrics VALUES(2,1,0,'params',20608.0);
INSERT INTO metrics VALUES(2,1,0,'peak_flops',166152704000.0);
INSERT INTO metrics VALUES(2,1,0,'resumed_from_step',0.0);
INSERT INTO metrics VALUES(2,1,0,'spectral_tensors',0.0);
INSERT INTO metrics VALUES(2,1,1,'step_time_s',0.0063059209999999999221);
INSERT INTO metrics VALUES(2,1,2,'step_time_s',0.0023085699999999998062);
INSERT INTO metrics VALUES(2,1,3,'step_time_s',0.0022146010000000000694);
INSERT INTO metrics VALUES(2,1,4,'step_time_s',0.0023886889999999998297);
INSERT INTO metrics VALUES(2,1,5,'step_time_s',0.0023104829999999998944);
INSERT INTO metrics VALUES(2,1,6,'step_time_s',0.00235168500000000006);
INSERT INTO metrics VALUES(2,1,7,'step_time_s',0.0050130499999999997978);
INSERT INTO metrics VALUES(2,1,8,'step_time_s',0.0023205190000000000538);
INSERT INTO metrics VALUES(2,1,9,'step_time_s',0.0022626019999999998424);
INSERT INTO metrics VALUES(2,1,10,'step_time_s',0.002206088000000000146);
INSERT INTO metrics VALUES(2,1,11,'step_time_s',0.0024380729999999998028);
INSERT INTO metrics VALUES(2,1,12,'step_time_s',0.0023498429999999998971);
INSERT INTO metrics VALUES(2,1,0,'threads',1.0);
INSERT INTO metrics VALUES(2,1,1,'tokens',256.0);
INSERT INTO metrics VALUES(2,1,2,'tokens',512.0);
INSERT INTO metrics VALUES(2,1,3,'tokens',768.0);
INSERT INTO metrics VALUES(2,1,4,'tokens',1024.0);
INSERT INTO metrics VALUES(2,1,5,'tokens',1280.0);
INSERT INTO metrics VALUES(2,1,6,'tokens',1536.0);
INSERT INTO metrics VALUES(2,1,7,'tokens',1792.0);
INSERT INTO metrics VALUES(2,1,8,'tokens',2048.0);
INSERT INTO metrics VALUES(2,1,9,'tokens',2304.0);
INSERT INTO metrics VALUES(2,1,10,'tokens',2560.0);
INSERT INTO metrics VALUES(2,1,11,'tokens',2816.0);
INSERT INTO metrics VALUES(2,1,12,'tokens',3072.0);
INSERT INTO metrics VALUES(2,1,1,'tokens_per_s',40596.766118700186778);
INSERT INTO metrics VALUES(2,1,2,'tokens_per_s',110891.15772967682278);
INSERT INTO metrics VALUES(2,1,3,'tokens_per_s',115596.44378377865359);
INSERT INTO metrics VALUES(2,1,4,'tokens_per_s',107171.75823223534097);
INSERT INTO metrics VALUES(2,1,5,'tokens_per_s',110799.34368701263156);
INSERT INTO metrics VALUES(2,1,6,'tokens_per_s',108858.11662701424211);
INSERT INTO metrics VALUES(2,1,7,'tokens_per_s',51066.715871575193885);
INSERT INTO metrics VALUES(2,1,8,'tokens_per_s',110320.14820822411275);
INSERT INTO metrics VALUES(2,1,9,'tokens_per_s',113144.07041096933244);
INSERT INTO metrics VALUES(2,1,10,'tokens_per_s',116042.51507646113168);
INSERT INTO metrics VALUES(2,1,11,'tokens_per_s',105000.95772357923852);
INSERT INTO metrics VALUES(2,1,12,'tokens_per_s',108943.4485623082146);
INSERT INTO metrics VALUES(2,1,0,'tokens_per_step',256.0);
INSERT INTO metrics VALUES(2,1,0,'train_tokens',5661500.0);
INSERT INTO metrics VALUES(2,1,0,'unigram_entropy',3.0766135342514502326);
INSERT INTO metrics VALUES(2,1,1,'update_rms_adamw',0.004984214515225664048);
INSERT INTO metrics VALUES(2,1,2,'update_rms_adamw',0.0077549833167811048351);
INSERT INTO metrics VALUES(2,1,3,'update_rms_adamw',0.0067515641318109708216);
INSERT INTO metrics VALUES(2,1,4,'update_rms_adamw',0.0058933016524029416607);
INSERT INTO metrics VALUES(2,1,5,'update_rms_adamw',0.0049915158237824599693);
INSERT INTO metrics VALUES(2,1,6,'update_rms_adamw',0.0040246003497789780561);
INSERT INTO metrics VALUES(2,1,7,'update_rms_adamw',0.0030413159527162636833);
INSERT INTO metrics VALUES(2,1,8,'update_rms_adamw',0.0019511119032205052805);
INSERT INTO metrics VALUES(2,1,9,'update_rms_adamw',0.0011521356186670183175);
INSERT INTO metrics VALUES(2,1,10,'update_rms_adamw',0.00051888723859719191114);
INSERT INTO metrics VALUES(2,1,11,'update_rms_adamw',0.00013355408222138568101);
INSERT INTO metrics VALUES(2,1,12,'update_rms_adamw',0.0);
INSERT INTO metrics VALUES(2,1,6,'val_bpb',5.3646861292060465942);
INSERT INTO metrics VALUES(2,1,12,'val_bpb',4.9808043421457748323);
INSERT INTO metrics VALUES(2,1,6,'val_loss',3.7185170650482177734);
INSERT INTO metrics VALUES(2,1,12,'val_loss',3.4524304866790771484);
INSERT INTO metrics VALUES(2,1,0,'val_tokens',297973.0);
INSERT INTO metrics VALUES(2,1,0,'vocab_size',256.0);
INSERT INTO metrics VALUES(3,1,0,'accumulation_steps',1.0);
INSERT INTO metrics VALUES(3,1,12,'best_val_loss',4.6390848159790039062);
INSERT INTO metrics VALUES(3,1,12,'elapsed_s',0.036755521999999998805);
INSERT INTO metrics VALUES(3,1,12,'final_train_loss',4.7025890350341796875);
INSERT INTO metrics VALUES(3,1,12,'final_val_loss',4.6390848159790039062);
INSERT INTO metrics VALUES(3,1,0,'flops_per_token',129024.0);
INSERT INTO metrics VALUES(3,1,1,'grad_norm',1.2157738847818888583);
INSERT INTO metrics VALUES(3,1,2,'grad_norm',1.6018515098309276112);
INSERT INTO metrics VALUES(3,1,3,'grad_norm',1.5450439210246913468);
INSERT INTO metrics VALUES(3,1,4,'grad_norm',1.4472976917948725539);
INSERT INTO metrics VALUES(3,1,5,'grad_norm',1.3521748710100580659);
INSERT INTO metrics VALUES(3,1,6,'grad_norm',1.3513507478214699109);
INSERT INTO metrics VALUES(3,1,7,'grad_norm',1.3520085740643148497);
INSERT INTO metrics VALUES(3,1,8,'grad_norm',1.3445189237318921904);
INSERT INTO metrics VALUES(3,1,9,'grad_norm',1.4114030234059813384);
INSERT INTO metrics VALUES(3,1,10,'grad_norm',1.2582062904288240368);
INSERT INTO metrics VALUES(3,1,11,'grad_norm',1.3742096903632947668);
INSERT INTO metrics VALUES(3,1,12,'grad_norm',2.1305064061614089609);
INSERT INTO metrics VALUES(3,1,1,'loss',5.5429291725158691406);
INSERT INTO metrics VALUES(3,1,2,'loss',5.4623332023620605468);
INSERT INTO metrics VALUES(3,1,3,'loss',5.2755160331726074218);
INSERT INTO metrics VALUES(3,1,4,'loss',5.1239056587219238281);
INSERT INTO metrics VALUES(3,1,5,'loss',5.0160450935363769531);
INSERT INTO metrics VALUES(3,1,6,'loss',4.9233174324035644531);
INSERT INTO metrics VALUES(3,1,7,'loss',4.8420262336730957031);
INSERT INTO metrics VALUES(3,1,8,'loss',4.7542734146118164062);
INSERT INTO metrics VALUES(3,1,9,'loss',4.6820821762084960937);
INSERT INTO metrics VALUES(3,1,10,'loss',4.7134633064270019531);
INSERT INTO metrics VALUES(3,1,11,'loss',4.6890377998352050781);
INSERT INTO metrics VALUES(3,1,12,'loss',4.7025890350341796875);
INSERT INTO metrics VALUES(3,1,1,'lr',0.0015000000000000000312);
INSERT INTO metrics VALUES(3,1,2,'lr',0.0030000000000000000624);
INSERT INTO metrics VALUES(3,1,3,'lr',0.0029265847744427307339);
INSERT INTO metrics VALUES(3,1,4,'lr',0.0027135254915624210277);
INSERT INTO metrics VALUES(3,1,5,'lr',0.0023816778784387098062);
INSERT INTO metrics VALUES(3,1,6,'lr',0.0019635254915624212289);
INSERT INTO metrics VALUES(3,1,7,'lr',0.0015000000000000000312);
INSERT INTO metrics VALUES(3,1,8,'lr',0.0010364745084375790503);
INSERT INTO metrics VALUES(3,1,9,'lr',0.00061832212156129047302);
INSERT INTO metrics VALUES(3,1,10,'lr',0.00028647450843757898053);
INSERT INTO metrics VALUES(3,1,11,'lr',7.3415225557269707997e-05);
INSERT INTO metrics VALUES(3,1,12,'lr',0.0);
INSERT INTO metrics VALUES(3,1,1,'lr_vector',0.00014999999999999998685);
INSERT INTO metrics VALUES(3,1,2,'lr_vector',0.00029999999999999997371);
INSERT INTO metrics VALUES(3,1,3,'lr_vector',0.00029265847744427303002);
INSERT INTO metrics VALUES(3,1,4,'lr_vector',0.00027135254915624211361);
INSERT INTO metrics VALUES(3,1,5,'lr_vector',0.00023816778784387093725);
INSERT INTO metrics VALUES(3,1,6,'lr_vector',0.00019635254915624210663);
INSERT INTO metrics VALUES(3,1,7,'lr_vector',0.00014999999999999998685);
INSERT INTO metrics VALUES(3,1,8,'lr_vector',0.00010364745084375789419);
INSERT INTO metrics VALUES(3,1,9,'lr_vector',6.183221215612903646e-05);
INSERT INTO metrics VALUES(3,1,10,'lr_vector',2.8647450843757897376e-05);
INSERT INTO metrics VALUES(3,1,11,'lr_vector',7.3415225557269699532e-06);
INSERT INTO metrics VALUES(3,1,12,'lr_vector',0.0);
INSERT INTO metrics VALUES(3,1,1,'mfu',0.033302431010896568763);
INSERT INTO metrics VALUES(3,1,2,'mfu',0.08625044194179062873);
INSERT INTO metrics VALUES(3,1,3,'mfu',0.086992437314654669222);
INSERT INTO metrics VALUES(3,1,4,'mfu',0.084184763215603627961);
INSERT INTO metrics VALUES(3,1,5,'mfu',0.086635195738065357007);
INSERT INTO metrics VALUES(3,1,6,'mfu',0.088036850777974892667);
INSERT INTO metrics VALUES(3,1,7,'mfu',0.06041135678933762243);
INSERT INTO metrics VALUES(3,1,8,'mfu',0.10466075809636161964);
INSERT INTO metrics VALUES(3,1,9,'mfu',0.10671389484242919942);
INSERT INTO metrics VALUES(3,1,10,'mfu',0.10495788085084301055);
INSERT INTO metrics VALUES(3,1,11,'mfu',0.1049884233810934736);
INSERT INTO metrics VALUES(3,1,12,'mfu',0.10683966832323024687);
INSERT INTO metrics VALUES(3,1,0,'optimizer_state_bytes',164864.0);
INSERT INTO metrics VALUES(3,1,0,'optimizer_state_bytes_fp32',164864.0);
INSERT INTO metrics VALUES(3,1,0,'optimizer_state_saved',0.0);
INSERT INTO metrics VALUES(3,1,0,'params',20608.0);
INSERT INTO metrics VALUES(3,1,0,'peak_flops',166152704000.0);
INSERT INTO metrics VALUES(3,1,0,'resumed_from_step',0.0);
INSERT INTO metrics VALUES(3,1,0,'spectral_tensors',0.0);
INSERT INTO metrics VALUES(3,1,1,'step_time_s',0.0059693510000000003443);
INSERT INTO metrics VALUES(3,1,2,'step_time_s',0.0023048449999999998105);
INSERT INTO metrics VALUES(3,1,3,'step_time_s',0.0022851859999999998146);
INSERT INTO metrics VALUES(3,1,4,'step_time_s',0.0023614000000000000441);
INSERT INTO metrics VALUES(3,1,5,'step_time_s',0.0022946089999999999715);
INSERT INTO metrics VALUES(3,1,6,'step_time_s',0.00225807599999999992);
INSERT INTO metrics VALUES(3,1,7,'step_time_s',0.0032906709999999997871);
INSERT INTO metrics VALUES(3,1,8,'step_time_s',0.0018994120000000000621);
INSERT INTO metrics VALUES(3,1,9,'step_time_s',0.0018628679999999999458);
INSERT INTO metrics VALUES(3,1,10,'step_time_s',0.0018940350000000000761);
INSERT INTO metrics VALUES(3,1,11,'step_time_s',0.0018934839999999999657);
INSERT INTO metrics VALUES(3,1,12,'step_time_s',0.0018606750000000000025);
INSERT INTO metrics VALUES(3,1,0,'threads',1.0);
INSERT INTO metrics VALUES(3,1,1,'tokens',256.0);
INSERT INTO metrics VALUES(3,1,2,'tokens',512.0);
INSERT INTO metrics VALUES(3,1,3,'tokens',768.0);
INSERT INTO metrics VALUES(3,1,4,'tokens',1024.0);
INSERT INTO metrics VALUES(3,1,5,'tokens',1280.0);
INSERT INTO metrics VALUES(3,1,6,'tokens',1536.0);
INSERT INTO metrics VALUES(3,1,7,'tokens',1792.0);
INSERT INTO metrics VALUES(3,1,8,'tokens',2048.0);
INSERT INTO metrics VALUES(3,1,9,'tokens',2304.0);
INSERT INTO metrics VALUES(3,1,10,'tokens',2560.0);
INSERT INTO metrics VALUES(3,1,11,'tokens',2816.0);
INSERT INTO metrics VALUES(3,1,12,'tokens',3072.0);
INSERT INTO metrics VALUES(3,1,1,'tokens_per_s',42885.734144298097818);
INSERT INTO metrics VALUES(3,1,2,'tokens_per_s',111070.37566517488448);
INSERT INTO metrics VALUES(3,1,3,'tokens_per_s',112025.89198428486997);
INSERT INTO metrics VALUES(3,1,4,'tokens_per_s',108410.26509697636356);
INSERT INTO metrics VALUES(3,1,5,'tokens_per_s',111565.84847353078657);
INSERT INTO metrics VALUES(3,1,6,'tokens_per_s',113370.85199966697837);
INSERT INTO metrics VALUES(3,1,7,'tokens_per_s',77795.683615894755348);
INSERT INTO metrics VALUES(3,1,8,'tokens_per_s',134778.55252046423266);
INSERT INTO metrics VALUES(3,1,9,'tokens_per_s',137422.51195468491642);
INSERT INTO metrics VALUES(3,1,10,'tokens_per_s',135161.17706378182629);
INSERT INTO metrics VALUES(3,1,11,'tokens_per_s',135200.50869191394303);
INSERT INTO metrics VALUES(3,1,12,'tokens_per_s',137584.47875099090743);
INSERT INTO metrics VALUES(3,1,0,'tokens_per_step',256.0);
INSERT INTO metrics VALUES(3,1,0,'train_tokens',5661500.0);
INSERT INTO metrics VALUES(3,1,0,'unigram_entropy',3.0766135342514502326);
INSERT INTO metrics VALUES(3,1,1,'update_rms_adamw',0.0014953090532240070203);
INSERT INTO metrics VALUES(3,1,2,'update_rms_adamw',0.0025196298973519299681);
INSERT INTO metrics VALUES(3,1,3,'update_rms_adamw',0.0022433246170010185185);
INSERT INTO metrics VALUES(3,1,4,'update_rms_adamw',0.0019709684956815444467);
INSERT INTO metrics VALUES(3,1,5,'update_rms_adamw',0.0016669351745585980761);
INSERT INTO metrics VALUES(3,1,6,'update_rms_adamw',0.0013293845172919890526);
INSERT INTO metrics VALUES(3,1,7,'update_rms_adamw',0.00099583004316570935404);
INSERT INTO metrics VALUES(3,1,8,'update_rms_adamw',0.00067764812222387879169);
INSERT INTO metrics VALUES(3,1,9,'update_rms_adamw',0.00040213688325646345213);
INSERT INTO metrics VALUES(3,1,10,'update_rms_adamw',0.00018551491839561898007);
INSERT INTO metrics VALUES(3,1,11,'update_rms_adamw',4.6974235216369623806e-05);
INSERT INTO metrics VALUES(3,1,12,'update_rms_adamw',0.0);
INSERT INTO metrics VALUES(3,1,6,'val_bpb',6.9183474721194100354);
INSERT INTO metrics VALUES(3,1,12,'val_bpb',6.6927846582761985061);
INSERT INTO metrics VALUES(3,1,6,'val_loss',4.79543304443359375);
INSERT INTO metrics VALUES(3,1,12,'val_loss',4.6390848159790039062);
INSERT INTO metrics VALUES(3,1,0,'val_tokens',297973.0);
INSERT INTO metrics VALUES(3,1,0,'vocab_size',256.0);
INSERT INTO metrics VALUES(4,1,0,'accumulation_steps',1.0);
INSERT INTO metrics VALUES(4,1,12,'best_val_loss',3.4019105434417724609);
INSERT INTO metrics VALUES(4,1,12,'elapsed_s',0.046070964999999998445);
INSERT INTO metrics VALUES(4,1,12,'final_train_loss',3.6322734355926513671);
INSERT INTO metrics VALUES(4,1,12,'final_val_loss',3.4019105434417724609);
INSERT INTO metrics VALUES(4,1,0,'flops_per_token',129024.0);
INSERT INTO metrics VALUES(4,1,1,'grad_norm',1.2157738847818888583);
INSERT INTO metrics VALUES(4,1,2,'grad_norm',1.6175563821463261326);
INSERT INTO metrics VALUES(4,1,3,'grad_norm',1.4283813889880652148);
INSERT INTO metrics VALUES(4,1,4,'grad_norm',1.3353614323244702433);
INSERT INTO metrics VALUES(4,1,5,'grad_norm',1.1658978515573412693);
INSERT INTO metrics VALUES(4,1,6,'grad_norm',1.1006922936123821887);
INSERT INTO metrics VALUES(4,1,7,'grad_norm',1.0258266300698388739);
INSERT INTO metrics VALUES(4,1,8,'grad_norm',1.011005783372211253);
INSERT INTO metrics VALUES(4,1,9,'grad_norm',0.98347954744412457994);
INSERT INTO metrics VALUES(4,1,10,'grad_norm',0.79490837532070346416);
INSERT INTO metrics VALUES(4,1,11,'grad_norm',1.2101273239306036266);
INSERT INTO metrics VALUES(4,1,12,'grad_norm',0.8610205195834170766);
INSERT INTO metrics VALUES(4,1,1,'loss',5.5429291725158691406);
INSERT INTO metrics VALUES(4,1,2,'loss',5.2933979034423828125);
INSERT INTO metrics VALUES(4,1,3,'loss',4.8525424003601074218);
INSERT INTO metrics VALUES(4,1,4,'loss',4.4760899543762207031);
INSERT INTO metrics VALUES(4,1,5,'loss',4.1872501373291015625);
INSERT INTO metrics VALUES(4,1,6,'loss',3.9528138637542724609);
INSERT INTO metrics VALUES(4,1,7,'loss',3.7935845851898193359);
INSERT INTO metrics VALUES(4,1,8,'loss',3.6369724273681640625);
INSERT INTO metrics VALUES(4,1,9,'loss',3.4726467132568359375);
INSERT INTO metrics VALUES(4,1,10,'loss',3.6007561683654785156);
INSERT INTO metrics VALUES(4,1,11,'loss',3.56516265869140625);
INSERT INTO metrics VALUES(4,1,12,'loss',3.6322734355926513671);
INSERT INTO metrics VALUES(4,1,1,'lr',0.005000000000000000104);
INSERT INTO metrics VALUES(4,1,2,'lr',0.010000000000000000208);
INSERT INTO metrics VALUES(4,1,3,'lr',0.009755282581475769113);
INSERT INTO metrics VALUES(4,1,4,'lr',0.0090450849718747370481);
INSERT INTO metrics VALUES(4,1,5,'lr',0.00793892626146236631);
INSERT INTO metrics VALUES(4,1,6,'lr',0.0065450849718747374297);
INSERT INTO metrics VALUES(4,1,7,'lr',0.005000000000000000104);
INSERT INTO metrics VALUES(4,1,8,'lr',0.003454915028125263212);
INSERT INTO metrics VALUES(4,1,9,'lr',0.0020610737385376347655);
INSERT INTO metrics VALUES(4,1,10,'lr',0.00095491502812526326843);
INSERT INTO metrics VALUES(4,1,11,'lr',0.00024471741852423234192);
INSERT INTO metrics VALUES(4,1,12,'lr',0.0);
INSERT INTO metrics VALUES(4,1,1,'lr_vector',0.00014999999999999998685);
INSERT INTO metrics VALUES(4,1,2,'lr_vector',0.00029999999999999997371);
INSERT INTO metrics VALUES(4,1,3,'lr_vector',0.00029265847744427303002);
INSERT INTO metrics VALUES(4,1,4,'lr_vector',0.00027135254915624211361);
INSERT INTO metrics VALUES(4,1,5,'lr_vector',0.00023816778784387093725);
INSERT INTO metrics VALUES(4,1,6,'lr_vector',0.00019635254915624210663);
INSERT INTO metrics VALUES(4,1,7,'lr_vector',0.00014999999999999998685);
INSERT INTO metrics VALUES(4,1,8,'lr_vector',0.00010364745084375789419);
INSERT INTO metrics VALUES(4,1,9,'lr_vector',6.183221215612903646e-05);
INSERT INTO metrics VALUES(4,1,10,'lr_vector',2.8647450843757897376e-05);
INSERT INTO metrics VALUES(4,1,11,'lr_vector',7.3415225557269699532e-06);
INSERT INTO metrics VALUES(4,1,12,'lr_vector',0.0);
INSERT INTO metrics VALUES(4,1,1,'mfu',0.033592789809197311223);
INSERT INTO metrics VALUES(4,1,2,'mfu',0.081737081344594217369);
INSERT INTO metrics VALUES(4,1,3,'mfu',0.063771937067012451905);
INSERT INTO metrics VALUES(4,1,4,'mfu',0.077638551714340114928);
INSERT INTO metrics VALUES(4,1,5,'mfu',0.08535293528105136751);
INSERT INTO metrics VALUES(4,1,6,'mfu',0.086683588155434559974);
INSERT INTO metrics VALUES(4,1,7,'mfu',0.082595840854920790641);
INSERT INTO metrics VALUES(4,1,8,'mfu',0.063512793318724017344);
INSERT INTO metrics VALUES(4,1,9,'mfu',0.081040968060532458938);
INSERT INTO metrics VALUES(4,1,10,'mfu',0.075012631359082079796);
INSERT INTO metrics VALUES(4,1,11,'mfu',0.082641576830268362319);
INSERT INTO metrics VALUES(4,1,12,'mfu',0.080020987982526228798);
INSERT INTO metrics VALUES(4,1,0,'optimizer_state_bytes',164864.0);
INSERT INTO metrics VALUES(4,1,0,'optimizer_state_bytes_fp32',164864.0);
INSERT INTO metrics VALUES(4,1,0,'optimizer_state_saved',0.0);
INSERT INTO metrics VALUES(4,1,0,'params',20608.0);
INSERT INTO metrics VALUES(4,1,0,'peak_flops',166152704000.0);
INSERT INTO metrics VALUES(4,1,0,'resumed_from_step',0.0);
INSERT INTO metrics VALUES(4,1,0,'spectral_tensors',0.0);
INSERT INTO metrics VALUES(4,1,1,'step_time_s',0.0059177550000000002372);
INSERT INTO metrics VALUES(4,1,2,'step_time_s',0.0024321139999999999772);
INSERT INTO metrics VALUES(4,1,3,'step_time_s',0.0031172629999999998916);
INSERT INTO metrics VALUES(4,1,4,'step_time_s',0.0025605049999999998124);
INSERT INTO metrics VALUES(4,1,5,'step_time_s',0.0023290810000000002066);
INSERT INTO metrics VALUES(4,1,6,'step_time_s',0.0022933279999999998596);
INSERT INTO metrics VALUES(4,1,7,'step_time_s',0.002406826999999999838);
INSERT INTO metrics VALUES(4,1,8,'step_time_s',0.0031299819999999999031);
INSERT INTO metrics VALUES(4,1,9,'step_time_s',0.0024530049999999998557);
INSERT INTO metrics VALUES(4,1,10,'step_time_s',0.0026501390000000001404);
INSERT INTO metrics VALUES(4,1,11,'step_time_s',0.0024054950000000001157);
INSERT INTO metrics VALUES(4,1,12,'step_time_s',0.0024842720000000000427);
INSERT INTO metrics VALUES(4,1,0,'threads',1.0);
INSERT INTO metrics VALUES(4,1,1,'tokens',256.0);
INSERT INTO metrics VALUES(4,1,2,'tokens',512.0);
INSERT INTO metrics VALUES(4,1,3,'tokens',768.0);
INSERT INTO metrics VALUES(4,1,4,'tokens',1024.0);
INSERT INTO metrics VALUES(4,1,5,'tokens',1280.0);
INSERT INTO metrics VALUES(4,1,6,'tokens',1536.0);
INSERT INTO metrics VALUES(4,1,7,'tokens',1792.0);
INSERT INTO metrics VALUES(4,1,8,'tokens',2048.0);
INSERT INTO metrics VALUES(4,1,9,'tokens',2304.0);
INSERT INTO metrics VALUES(4,1,10,'tokens',2560.0);
INSERT INTO metrics VALUES(4,1,11,'tokens',2816.0);
INSERT INTO metrics VALUES(4,1,12,'tokens',3072.0);
INSERT INTO metrics VALUES(4,1,1,'tokens_per_s',43259.648295679697183);
INSERT INTO metrics VALUES(4,1,2,'tokens_per_s',105258.22391549080202);
INSERT INTO metrics VALUES(4,1,3,'tokens_per_s',82123.324211014594765);
INSERT INTO metrics VALUES(4,1,4,'tokens_per_s',99980.277328105206834);
INSERT INTO metrics VALUES(4,1,5,'tokens_per_s',109914.59721667043049);
INSERT INTO metrics VALUES(4,1,6,'tokens_per_s',111628.16657713157473);
INSERT INTO metrics VALUES(4,1,7,'tokens_per_s',106364.10510601718851);
INSERT INTO metrics VALUES(4,1,8,'tokens_per_s',81789.60773576333304);
INSERT INTO metrics VALUES(4,1,9,'tokens_per_s',104361.7929845230683);
INSERT INTO metrics VALUES(4,1,10,'tokens_per_s',96598.706709346181011);
INSERT INTO metrics VALUES(4,1,11,'tokens_per_s',106423.00233423888858);
INSERT INTO metrics VALUES(4,1,12,'tokens_per_s',103048.29744891058362);
INSERT INTO metrics VALUES(4,1,0,'tokens_per_step',256.0);
INSERT INTO metrics VALUES(4,1,0,'train_tokens',5661500.0);
INSERT INTO metrics VALUES(4,1,0,'unigram_entropy',3.0766135342514502326);
INSERT INTO metrics VALUES(4,1,1,'update_rms_adamw',0.0049842216410664755624);
INSERT INTO metrics VALUES(4,1,2,'update_rms_adamw',0.0077956867845738299707);
INSERT INTO metrics VALUES(4,1,3,'update_rms_adamw',0.0066753153764717663293);
INSERT INTO metrics VALUES(4,1,4,'update_rms_adamw',0.0059503812978214404988);
INSERT INTO metrics VALUES(4,1,5,'update_rms_adamw',0.0050637346420850330025);
INSERT INTO metrics VALUES(4,1,6,'update_rms_adamw',0.0040854797352613903341);
INSERT INTO metrics VALUES(4,1,7,'update_rms_adamw',0.0030638885580038981507);
INSERT INTO metrics VALUES(4,1,8,'update_rms_adamw',0.0021068488931970832771);
INSERT INTO metrics VALUES(4,1,9,'update_rms_adamw',0.0012380320240815527454);
INSERT INTO metrics VALUES(4,1,10,'update_rms_adamw',0.00056172367995723057783);
INSERT INTO metrics VALUES(4,1,11,'update_rms_adamw',0.00014028772987527041811);
INSERT INTO metrics VALUES(4,1,12,'update_rms_adamw',0.0);
INSERT INTO metrics VALUES(4,1,6,'val_bpb',5.2902059465621924516);
INSERT INTO metrics VALUES(4,1,12,'val_bpb',4.9079194705713238278);
INSERT INTO metrics VALUES(4,1,6,'val_loss',3.666891336441040039);
INSERT INTO metrics VALUES(4,1,12,'val_loss',3.4019105434417724609);
INSERT INTO metrics VALUES(4,1,0,'val_tokens',297973.0);
INSERT INTO metrics VALUES(4,1,0,'vocab_size',256.0);
CREATE TABLE metric_batches(
  trial_id INTEGER NOT NULL REFERENCES trials(id),
  attempt INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  points INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY(trial_id, attempt, seq)) WITHOUT ROWID;
INSERT INTO metric_batches VALUES(1,1,1,0);
INSERT INTO metric_batches VALUES(1,1,2,71);
INSERT INTO metric_batches VALUES(1,1,3,0);
INSERT INTO metric_batches VALUES(1,1,4,56);
INSERT INTO metric_batches VALUES(1,1,5,0);
INSERT INTO metric_batches VALUES(1,1,6,4);
INSERT INTO metric_batches VALUES(1,1,7,0);
INSERT INTO metric_batches VALUES(2,1,1,0);
INSERT INTO metric_batches VALUES(2,1,2,71);
INSERT INTO metric_batches VALUES(2,1,3,0);
INSERT INTO metric_batches VALUES(2,1,4,56);
INSERT INTO metric_batches VALUES(2,1,5,0);
INSERT INTO metric_batches VALUES(2,1,6,4);
INSERT INTO metric_batches VALUES(2,1,7,0);
INSERT INTO metric_batches VALUES(3,1,1,0);
INSERT INTO metric_batches VALUES(3,1,2,71);
INSERT INTO metric_batches VALUES(3,1,3,0);
INSERT INTO metric_batches VALUES(3,1,4,56);
INSERT INTO metric_batches VALUES(3,1,5,0);
INSERT INTO metric_batches VALUES(3,1,6,4);
INSERT INTO metric_batches VALUES(3,1,7,0);
INSERT INTO metric_batches VALUES(4,1,1,0);
INSERT INTO metric_batches VALUES(4,1,2,71);
INSERT INTO metric_batches VALUES(4,1,3,0);
INSERT INTO metric_batches VALUES(4,1,4,56);
INSERT INTO metric_batches VALUES(4,1,5,0);
INSERT INTO metric_batches VALUES(4,1,6,4);
INSERT INTO metric_batches VALUES(4,1,7,0);
CREATE TABLE latest_metrics(
  trial_id INTEGER NOT NULL REFERENCES trials(id),
  name TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  step INTEGER NOT NULL,
  value REAL,
  PRIMARY KEY(trial_id, name)) WITHOUT ROWID;
INSERT INTO latest_metrics VALUES(1,'accumulation_steps',1,0,1.0);
INSERT INTO latest_metrics VALUES(1,'best_val_loss',1,12,4.6466479301452636718);
INSERT INTO latest_metrics VALUES(1,'elapsed_s',1,12,0.040676988999999996732);
INSERT INTO latest_metrics VALUES(1,'final_train_loss',1,12,4.6914243698120117187);
INSERT INTO latest_metrics VALUES(1,'final_val_loss',1,12,4.6466479301452636718);
INSERT INTO latest_metrics VALUES(1,'flops_per_token',1,0,129024.0);
INSERT INTO latest_metrics VALUES(1,'grad_norm',1,12,1.3101027603207839877);
INSERT INTO latest_metrics VALUES(1,'loss',1,12,4.6914243698120117187);
INSERT INTO latest_metrics VALUES(1,'lr',1,12,0.0);
INSERT INTO latest_metrics VALUES(1,'lr_vector',1,12,0.0);
INSERT INTO latest_metrics VALUES(1,'mfu',1,12,0.085502200999703834027);
INSERT INTO latest_metrics VALUES(1,'optimizer_state_bytes',1,0,164864.0);
INSERT INTO latest_metrics VALUES(1,'optimizer_state_bytes_fp32',1,0,164864.0);
INSERT INTO latest_metrics VALUES(1,'optimizer_state_saved',1,0,0.0);
INSERT INTO latest_metrics VALUES(1,'params',1,0,20608.0);
INSERT INTO latest_metrics VALUES(1,'peak_flops',1,0,166152704000.0);
INSERT INTO latest_metrics VALUES(1,'resumed_from_step',1,0,0.0);
INSERT INTO latest_metrics VALUES(1,'spectral_tensors',1,0,0.0);
INSERT INTO latest_metrics VALUES(1,'step_time_s',1,12,0.0023250150000000001544);
INSERT INTO latest_metrics VALUES(1,'threads',1,0,1.0);
INSERT INTO latest_metrics VALUES(1,'tokens',1,12,3072.0);
INSERT INTO latest_metrics VALUES(1,'tokens_per_s',1,12,110106.81651516226702);
INSERT INTO latest_metrics VALUES(1,'tokens_per_step',1,0,256.0);
INSERT INTO latest_metrics VALUES(1,'train_tokens',1,0,5661500.0);
INSERT INTO latest_metrics VALUES(1,'unigram_entropy',1,0,3.0766135342514502326);
INSERT INTO latest_metrics VALUES(1,'update_rms_adamw',1,12,0.0);
INSERT INTO latest_metrics VALUES(1,'val_bpb',1,12,6.7036959255775387944);
INSERT INTO latest_metrics VALUES(1,'val_loss',1,12,4.6466479301452636718);
INSERT INTO latest_metrics VALUES(1,'val_tokens',1,0,297973.0);
INSERT INTO latest_metrics VALUES(1,'vocab_size',1,0,256.0);
INSERT INTO latest_metrics VALUES(2,'accumulation_steps',1,0,1.0);
INSERT INTO latest_metrics VALUES(2,'best_val_loss',1,12,3.4524304866790771484);
INSERT INTO latest_metrics VALUES(2,'elapsed_s',1,12,0.047684613000000000693);
INSERT INTO latest_metrics VALUES(2,'final_train_loss',1,12,3.560148477554321289);
INSERT INTO latest_metrics VALUES(2,'final_val_loss',1,12,3.4524304866790771484);
INSERT INTO latest_metrics VALUES(2,'flops_per_token',1,0,129024.0);
INSERT INTO latest_metrics VALUES(2,'grad_norm',1,12,0.83221568528023903699);
INSERT INTO latest_metrics VALUES(2,'loss',1,12,3.560148477554321289);
INSERT INTO latest_metrics VALUES(2,'lr',1,12,0.0);
INSERT INTO latest_metrics VALUES(2,'lr_vector',1,12,0.0);
INSERT INTO latest_metrics VALUES(2,'mfu',1,12,0.084598800795340989289);
INSERT INTO latest_metrics VALUES(2,'optimizer_state_bytes',1,0,164864.0);
INSERT INTO latest_metrics VALUES(2,'optimizer_state_bytes_fp32',1,0,164864.0);
INSERT INTO latest_metrics VALUES(2,'optimizer_state_saved',1,0,0.0);
INSERT INTO latest_metrics VALUES(2,'params',1,0,20608.0);
INSERT INTO latest_metrics VALUES(2,'peak_flops',1,0,166152704000.0);
INSERT INTO latest_metrics VALUES(2,'resumed_from_step',1,0,0.0);
INSERT INTO latest_metrics VALUES(2,'spectral_tensors',1,0,0.0);
INSERT INTO latest_metrics VALUES(2,'step_time_s',1,12,0.0023498429999999998971);
INSERT INTO latest_metrics VALUES(2,'threads',1,0,1.0);
INSERT INTO latest_metrics VALUES(2,'tokens',1,12,3072.0);
INSERT INTO latest_metrics VALUES(2,'tokens_per_s',1,12,108943.4485623082146);
INSERT INTO latest_metrics VALUES(2,'tokens_per_step',1,0,256.0);
INSERT INTO latest_metrics VALUES(2,'train_tokens',1,0,5661500.0);
INSERT INTO latest_metrics VALUES(2,'unigram_entropy',1,0,3.0766135342514502326);
INSERT INTO latest_metrics VALUES(2,'update_rms_adamw',1,12,0.0);
INSERT INTO latest_metrics VALUES(2,'val_bpb',1,12,4.9808043421457748323);
INSERT INTO latest_metrics VALUES(2,'val_loss',1,12,3.4524304866790771484);
INSERT INTO latest_metrics VALUES(2,'val_tokens',1,0,297973.0);
INSERT INTO latest_metrics VALUES(2,'vocab_size',1,0,256.0);
INSERT INTO latest_metrics VALUES(3,'accumulation_steps',1,0,1.0);
INSERT INTO latest_metrics VALUES(3,'best_val_loss',1,12,4.6390848159790039062);
INSERT INTO latest_metrics VALUES(3,'elapsed_s',1,12,0.036755521999999998805);
INSERT INTO latest_metrics VALUES(3,'final_train_loss',1,12,4.7025890350341796875);
INSERT INTO latest_metrics VALUES(3,'final_val_loss',1,12,4.6390848159790039062);
INSERT INTO latest_metrics VALUES(3,'flops_per_token',1,0,129024.0);
INSERT INTO latest_metrics VALUES(3,'grad_norm',1,12,2.1305064061614089609);
INSERT INTO latest_metrics VALUES(3,'loss',1,12,4.7025890350341796875);
INSERT INTO latest_metrics VALUES(3,'lr',1,12,0.0);
INSERT INTO latest_metrics VALUES(3,'lr_vector',1,12,0.0);
INSERT INTO latest_metrics VALUES(3,'mfu',1,12,0.10683966832323024687);
INSERT INTO latest_metrics VALUES(3,'optimizer_state_bytes',1,0,164864.0);
INSERT INTO latest_metrics VALUES(3,'optimizer_state_bytes_fp32',1,0,164864.0);
INSERT INTO latest_metrics VALUES(3,'optimizer_state_saved',1,0,0.0);
INSERT INTO latest_metrics VALUES(3,'params',1,0,20608.0);
INSERT INTO latest_metrics VALUES(3,'peak_flops',1,0,166152704000.0);
INSERT INTO latest_metrics VALUES(3,'resumed_from_step',1,0,0.0);
INSERT INTO latest_metrics VALUES(3,'spectral_tensors',1,0,0.0);
INSERT INTO latest_metrics VALUES(3,'step_time_s',1,12,0.0018606750000000000025);
INSERT INTO latest_metrics VALUES(3,'threads',1,0,1.0);
INSERT INTO latest_metrics VALUES(3,'tokens',1,12,3072.0);
INSERT INTO latest_metrics VALUES(3,'tokens_per_s',1,12,137584.47875099090743);
INSERT INTO latest_metrics VALUES(3,'tokens_per_step',1,0,256.0);
INSERT INTO latest_metrics VALUES(3,'train_tokens',1,0,5661500.0);
INSERT INTO latest_metrics VALUES(3,'unigram_entropy',1,0,3.0766135342514502326);
INSERT INTO latest_metrics VALUES(3,'update_rms_adamw',1,12,0.0);
INSERT INTO latest_metrics VALUES(3,'val_bpb',1,12,6.6927846582761985061);
INSERT INTO latest_metrics VALUES(3,'val_loss',1,12,4.6390848159790039062);
INSERT INTO latest_metrics VALUES(3,'val_tokens',1,0,297973.0);
INSERT INTO latest_metrics VALUES(3,'vocab_size',1,0,256.0);
INSERT INTO latest_metrics VALUES(4,'accumulation_steps',1,0,1.0);
INSERT INTO latest_metrics VALUES(4,'best_val_loss',1,12,3.4019105434417724609);
INSERT INTO latest_metrics VALUES(4,'elapsed_s',1,12,0.046070964999999998445);
INSERT INTO latest_metrics VALUES(4,'final_train_loss',1,12,3.6322734355926513671);
INSERT INTO latest_metrics VALUES(4,'final_val_loss',1,12,3.4019105434417724609);
INSERT INTO latest_metrics VALUES(4,'flops_per_token',1,0,129024.0);
INSERT INTO latest_metrics VALUES(4,'grad_norm',1,12,0.8610205195834170766);
INSERT INTO latest_metrics VALUES(4,'loss',1,12,3.6322734355926513671);
INSERT INTO latest_metrics VALUES(4,'lr',1,12,0.0);
INSERT INTO latest_metrics VALUES(4,'lr_vector',1,12,0.0);
INSERT INTO latest_metrics VALUES(4,'mfu',1,12,0.080020987982526228798);
INSERT INTO latest_metrics VALUES(4,'optimizer_state_bytes',1,0,164864.0);
INSERT INTO latest_metrics VALUES(4,'optimizer_state_bytes_fp32',1,0,164864.0);
INSERT INTO latest_metrics VALUES(4,'optimizer_state_saved',1,0,0.0);
INSERT INTO latest_metrics VALUES(4,'params',1,0,20608.0);
INSERT INTO latest_metrics VALUES(4,'peak_flops',1,0,166152704000.0);
INSERT INTO latest_metrics VALUES(4,'resumed_from_step',1,0,0.0);
INSERT INTO latest_metrics VALUES(4,'spectral_tensors',1,0,0.0);
INSERT INTO latest_metrics VALUES(4,'step_time_s',1,12,0.0024842720000000000427);
INSERT INTO latest_metrics VALUES(4,'threads',1,0,1.0);
INSERT INTO latest_metrics VALUES(4,'tokens',1,12,3072.0);
INSERT INTO latest_metrics VALUES(4,'tokens_per_s',1,12,103048.29744891058362);
INSERT INTO latest_metrics VALUES(4,'tokens_per_step',1,0,256.0);
INSERT INTO latest_metrics VALUES(4,'train_tokens',1,0,5661500.0);
INSERT INTO latest_metrics VALUES(4,'unigram_entropy',1,0,3.0766135342514502326);
INSERT INTO latest_metrics VALUES(4,'update_rms_adamw',1,12,0.0);
INSERT INTO latest_metrics VALUES(4,'val_bpb',1,12,4.9079194705713238278);
INSERT INTO latest_metrics VALUES(4,'val_loss',1,12,3.4019105434417724609);
INSERT INTO latest_metrics VALUES(4,'val_tokens',1,0,297973.0);
INSERT INTO latest_metrics VALUES(4,'vocab_size',1,0,256.0);
CREATE TABLE workers(
  id TEXT PRIMARY KEY,
  hostname TEXT NOT NULL DEFAULT '',
  gpus_json TEXT NOT NULL DEFAULT '[]',
  cpu_slots INTEGER NOT NULL DEFAULT 0,
  state TEXT NOT NULL DEFAULT '',
  registered_at REAL,
  last_seen_at REAL,
  failures INTEGER NOT NULL DEFAULT 0,
  quarantined INTEGER NOT NULL DEFAULT 0,
  draining INTEGER NOT NULL DEFAULT 0);
INSERT INTO workers VALUES('vm-81a6d7','vm','[]',2,'lost',1796248456.3734276294,1796248466.3742377757,0,0,0);
CREATE TABLE events(
  id INTEGER PRIMARY KEY,
  time REAL NOT NULL,
  kind TEXT NOT NULL,
  sweep_id INTEGER,
  trial_id INTEGER,
  attempt INTEGER,
  worker_id TEXT,
  message TEXT NOT NULL DEFAULT '');
INSERT INTO events VALUES(1,1796248456.3740978241,'worker_registered',NULL,NULL,NULL,'vm-81a6d7','0 GPUs, 2 CPU slots, 0 adopted');
INSERT INTO events VALUES(2,1796248456.3742463589,'submit',1,NULL,NULL,NULL,'4 new trials of 4');
INSERT INTO events VALUES(3,1796248456.3839571476,'attempt_started',1,1,1,'vm-81a6d7','');
INSERT INTO events VALUES(4,1796248456.4012677669,'attempt_started',1,2,1,'vm-81a6d7','');
INSERT INTO events VALUES(5,1796248456.7611074447,'trial_succeeded',1,2,1,'vm-81a6d7','');
INSERT INTO events VALUES(6,1796248456.7687060833,'attempt_started',1,3,1,'vm-81a6d7','');
INSERT INTO events VALUES(7,1796248456.7697999476,'trial_succeeded',1,1,1,'vm-81a6d7','');
INSERT INTO events VALUES(8,1796248456.8033294678,'attempt_started',1,4,1,'vm-81a6d7','');
INSERT INTO events VALUES(9,1796248457.0789957047,'trial_succeeded',1,3,1,'vm-81a6d7','');
INSERT INTO events VALUES(10,1796248457.1086945533,'trial_succeeded',1,4,1,'vm-81a6d7','');
INSERT INTO events VALUES(11,1796248467.439889431,'worker_disconnected',NULL,NULL,NULL,'vm-81a6d7','');
CREATE INDEX trials_by_sweep_state ON trials(sweep_id, state);
CREATE INDEX attempts_running ON attempts(trial_id, attempt) WHERE state = 'running';
CREATE INDEX events_by_trial ON events(trial_id) WHERE trial_id IS NOT NULL;
CREATE INDEX events_by_sweep ON events(sweep_id) WHERE sweep_id IS NOT NULL;
COMMIT;
